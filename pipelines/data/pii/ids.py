"""National identity numbers, recognised in every language (a French contract can quote a
Spanish DNI) and kept only when their check digits hold, by python-stdnum's validators.

Spanish DNI and NIE, French NIR, Italian codice fiscale, Portuguese NIF (only beside its
name: one random 9-digit number in 11 passes its check) and US SSN (no check digit: the
dashed form, or its name before it). The forms each accepts:
docs/personal-data.md#how-each-kind-is-found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.it import codicefiscale
from stdnum.pt import nif
from stdnum.us import ssn

from pipelines.data.pii.scan import Scan, find_all

_DNI = re.compile(r"\b(?:\d{8}|\d{1,2}\.\d{3}\.\d{3})[\- ]?[A-Za-z](?![\w\-])", re.ASCII)
_NIE = re.compile(r"\b[XYZxyz][\- ]?\d{7}[\- ]?[A-Za-z](?![\w\-])", re.ASCII)
_NIR = re.compile(
    r"(?<![\w.\-])[1-478][ .]?\d{2}[ .]?\d{2}[ .]?(?:\d{2}|2[ABab])[ .]?\d{3}[ .]?\d{3}"
    r"[ .]?\d{2}(?![\w\-]|[ .]\d)",
    re.ASCII,
)
_CF_DIGIT = "[0-9LMNPQRSTUV]"  # omocodia: colliding codes swap digits for these letters
_CODICE_FISCALE = re.compile(
    rf"\b[A-Za-z]{{6}}{_CF_DIGIT}{{2}}[ABCDEHLMPRSTabcdehlmprst]{_CF_DIGIT}{{2}}"
    rf"[A-Za-z]{_CF_DIGIT}{{3}}[A-Za-z]\b",
    re.ASCII,
)
_NIF = re.compile(
    r"\b(?:NIF|NIPC|contribuinte|n[úu]mero\s+(?:de\s+identifica[çc][ãa]o\s+)?fiscal|"
    r"tax\s+(?:id|number)|VAT(?:\s+number)?)\b[^\d\n]{0,16}?(?:n\.?\s?[º°o]\.?\s*)?(?:PT\s?)?"
    r"(\d{3}[ .]?\d{3}[ .]?\d{3})(?![\w\-]|[ .]\d)",
    re.IGNORECASE | re.ASCII,
)
_SSN_DASHED = re.compile(r"(?<![\w\-])\d{3}-\d{2}-\d{4}(?![\w\-])", re.ASCII)
_SSN_NAMED = re.compile(
    r"\b(?:SSN|social\s+security(?:\s+number)?|seguridad\s+social|s[ée]curit[ée]\s+sociale)"
    r"\b[^\d\n]{0,24}?(\d{3}[ ]?\d{2}[ ]?\d{4})(?![\w\-]|[ .]\d)",
    re.IGNORECASE | re.ASCII,
)


def _compact(value: str) -> str:
    """The bare characters the validators read: stdnum strips spaces and dashes but not the
    dots of "12.345.678-Z"."""
    return value.replace(".", "").replace(" ", "").replace("-", "").upper()


def _spans(
    pattern: re.Pattern[str], valid: Callable[[str], bool], text: str, lo: int, hi: int,
    group: int = 0,
) -> Iterator[tuple[int, int]]:
    for m in pattern.finditer(text, lo, hi):
        if valid(_compact(m.group(group))):
            yield m.start(group), m.end(group)


# The shape (scan.Scan.shape) of a codice fiscale without omocodia.
_CF_SHAPE = b"AAAAAA00A00A000A"


# The SSN printed on a wallet insert (078-05-1120), in ads (219-09-9999, 457-55-5462),
# refused by stdnum already; and the one every form and tutorial shows as an example.
_EXAMPLE_SSNS = frozenset({"123456789"})


def _ssn_valid(value: str) -> bool:
    return value not in _EXAMPLE_SSNS and ssn.is_valid(value)


def find_national_ids(scan: Scan) -> Iterator[tuple[int, int]]:
    """(start, end) of each national ID in the text whose check digits (or, for an SSN,
    its ranges and context) hold; spans may overlap one another (the caller resolves)."""
    text = scan.text
    for lo, hi in scan.digit_windows(7):
        yield from _spans(_DNI, dni.is_valid, text, lo, hi)
        yield from _spans(_NIE, nie.is_valid, text, lo, hi)
        yield from _spans(_NIR, nir.is_valid, text, lo, hi)
        yield from _spans(_NIF, nif.is_valid, text, lo, hi, 1)
        yield from _spans(_SSN_DASHED, _ssn_valid, text, lo, hi)
        yield from _spans(_SSN_NAMED, _ssn_valid, text, lo, hi, 1)
    for lo, hi in scan.around(find_all(scan.shape, _CF_SHAPE), 1, 17):
        yield from _spans(_CODICE_FISCALE, codicefiscale.is_valid, text, lo, hi)
