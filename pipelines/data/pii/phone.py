"""Phone numbers: international (+NN / 00NN) numbers of any country and national numbers
of the configured regions, as Google's libphonenumber (the `phonenumbers` port) reads
them.

Digit runs found cheaply (scan.py) that are something else by their look or neighbours
(a date, an address, an amount, a reference) are dropped; the rest go to libphonenumber
only for the regions whose lengths fit, as a call costs 100-200 µs. A number must be
valid, carry its national prefix, be grouped as its region writes it and be the whole
run; a bare digit run also needs a phone word before it. docs/personal-data.md#how-each-kind-is-found.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from functools import cache

import phonenumbers

from pipelines.data.pii.scan import Scan

# The countries whose national formats a language's corpus is written in; international
# numbers of every country are found whatever the language.
LANGUAGE_REGIONS: dict[str, tuple[str, ...]] = {
    "es": ("ES",),
    "fr": ("FR", "BE", "CH", "LU", "CA"),
    "en": ("US", "GB", "IE", "CA", "AU"),
    "de": ("DE", "AT", "CH"),
    "pt": ("PT", "BR"),
    "it": ("IT", "CH"),
    "ca": ("ES", "AD"),
}

# A run of digits and separators that could be one or more numbers; only searched in the
# windows around digit clusters (scan.Scan.digit_windows).
_CANDIDATE = re.compile(
    r"(?<![\w+\-.])(?:\(?\+|\()?\d[\d \u00a0.\-()/]{5,40}\d\)?(?![\w\-]|[.,]\d)", re.ASCII
)
_COMPACT = re.compile(r"\(?\d+\)?")
_BETWEEN = re.compile(r"\s*/\s*|\s{2,}", re.ASCII)
_DIGIT = re.compile(r"\d", re.ASCII)
# A digit group, or a time's "19:04:", just before: the run is part of something longer.
_DIGIT_BEFORE = re.compile(r"\d[ .\-]?$|\d:$", re.ASCII)
_DIGIT_AFTER = re.compile(r"[ .\-]?\d", re.ASCII)
_NOT_A_PHONE = re.compile(
    r"(?:#|\bv|\bversi[oó]n|\brelease|\bbug|\bissue|\bticket|\border|\bpedido|\bcommande"
    r"|\bfactura|\bfacture|\binvoice|\bref(?:erence|erencia|érence)?\.?|\bisbn(?:-1[03])?"
    r"|\bn\.?\s?[º°o]\.?|\bno\.|\bnum\.|\bnúm\.|\bart\.|\bcommit)\s*[:.]?\s*$",
    re.IGNORECASE,
)


# Dates libphonenumber may read as numbers ("2024-05-06", "06.05.2024", also followed by
# an hour: "2021-07-08 14"), and ranges or lists of years or pages ("2011-2013",
# "3119--3137", "2016 2016").
_Y, _M, _D = r"(?:19|20)\d\d", r"(?:0?[1-9]|1[0-2])", r"(?:0?[1-9]|[12]\d|3[01])"
_DATE = re.compile(
    rf"(?<!\d)(?:\d{{4}}([\-./]){_M}\1{_D}|{_D}([\-./]){_M}\2{_Y}|{_M}([\-./]){_D}\3{_Y})(?!\d)"
    rf"|^\d{{4}} ?-{{1,2}} ?\d{{4}}$|--|^(?:{_Y}[ ,\-]*){{2,}}$"
)
# One decimal point or comma: a measurement or coordinate ("40.416775"), not a number
# grouped for reading (a leading zero makes it a number again: "07404.180972").
_DECIMAL = re.compile(r"^(?:0|[1-9]\d*)[.,]\d+$")
# Words that announce a phone number. A national number written as one bare run of digits
# ("2147483647", "17179869184") is read only after one of them: integers in code, logs
# and tables are too often valid numbers somewhere (a US number is any 10 digits whose
# area code and exchange start with 2-9).
_PHONE_WORD = re.compile(
    r"tel|tél|phone|fon|m[óo]vil|mobile|portable|cell|fax|call|llam|appel|contact|whatsapp"
    r"|sms|handy|telem[óo]vel|celular|ruf|n[úu]mero|num[ée]ro|number",
    re.IGNORECASE,
)
# The US SSN's shape, 3-2-4 with dashes: no country groups its phone numbers so.
_SSN_SHAPE = re.compile(r"^\d{3}-\d{2}-\d{4}$")
# The start of an IBAN, its groups of four: what follows is the rest of the account number
# (one with a wrong checksum, or the IBAN reader would have claimed it).
_IBAN_BEFORE = re.compile(r"\b[A-Z]{2}\d{2}(?: [A-Z0-9]{4})* $")
# A figure followed by a currency or a unit is an amount: "839 902 274 €".
_UNIT_AFTER = re.compile(
    r"\s?(?:€|\$|£|%|‰|eur\b|euros?\b|usd\b|dollars?\b|px\b|pixels?\b|p[íi]xeles\b|veces\b"
    r"|fois\b|times\b|km\b|kg\b|[kmgt]i?b\b|bytes?\b|octets?\b)",
    re.IGNORECASE,
)


def regions_for(language: str, configured: Iterable[str] = ()) -> tuple[str, ...]:
    """The regions whose national formats are recognised: the configured ones, else the
    language's countries (none for a language not listed: international numbers only)."""
    chosen = tuple(r.upper() for r in configured)
    return chosen or LANGUAGE_REGIONS.get(language, ())


@cache
def _lengths(region: str) -> tuple[frozenset[int], str]:
    """The region's national number lengths and its national (trunk) prefix."""
    meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
    if meta is None:
        return frozenset(range(4, 18)), ""
    return frozenset(meta.general_desc.possible_length), meta.national_prefix or ""


# Regions whose numbers are often written without their national prefix: the NANP's
# trunk "1" is optional ("(415) 555-0123"), Brazil's "0" too ("(11) 96123-4567").
# Elsewhere libphonenumber's VALID leniency rejects a national number without its prefix
# anyway ("6 12 34 56 78" is no French number), so the matcher need not be asked.
_PREFIX_OPTIONAL = frozenset({"US", "CA", "BR"})


def _could_be(digits: str, region: str) -> bool:
    """Whether a national number of `region` could be written with these digits: a cheap
    length and prefix test that spares a matcher call per region (each costs ~100 µs)."""
    lengths, prefix = _lengths(region)
    with_prefix = bool(prefix) and digits.startswith(prefix) and len(digits) - len(prefix) in lengths
    if prefix and region not in _PREFIX_OPTIONAL:
        return with_prefix
    return with_prefix or len(digits) in lengths


def _is_lookalike(text: str, start: int, end: int, raw: str) -> bool:
    """Whether the digits at [start, end) are something else: a date, a range, a decimal,
    an address, an SSN, a figure with a unit, a reference after "#" or "order", or part of
    a longer chain of digit groups (a card or IBAN that failed its checksum, a table row)."""
    if _DATE.search(raw) or _DECIMAL.match(raw) or _SSN_SHAPE.match(raw):
        return True
    if sum(ch.isdigit() for ch in raw) < 7 or _IBAN_BEFORE.search(text, max(0, start - 40), start):
        return True
    if _DIGIT_BEFORE.search(text, max(0, start - 2), start) or _DIGIT_AFTER.match(text, end):
        return True
    try:
        ipaddress.IPv4Address(raw)
        return True
    except ValueError:
        pass
    return bool(_NOT_A_PHONE.search(text, max(0, start - 16), start)
                or _UNIT_AFTER.match(text, end))


def _parts(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """A candidate run split where one number ends and another begins ("06 12 34 56 78 /
    06 98 76 54 32"); a part with more digits than any phone number (an account number,
    a table row) is left out."""
    lo = start
    for m in _BETWEEN.finditer(text, start, end):
        yield from _short(text, lo, m.start())
        lo = m.end()
    yield from _short(text, lo, end)


def _short(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    if 7 <= len(_DIGIT.findall(text, start, end)) <= 17:
        yield start, end


def find_phones(
    scan: Scan, regions: tuple[str, ...], taken: Iterable[tuple[int, int]] = ()
) -> Iterator[tuple[int, int]]:
    """(start, end) of each valid phone number in the text. `taken`: spans already found
    as a kind that wins overlaps (an IBAN, a card): digits inside them are not read again."""
    text = scan.text
    claimed = sorted(taken)
    for lo, hi in scan.digit_windows(7, before=4, after=4):
        for run in _CANDIDATE.finditer(text, lo, hi):
            for start, end in _parts(text, run.start(), run.end()):
                # "(54103883" or "612 34 56 78)": a bracket of the prose, not an area code's
                if text[start] == "(" and ")" not in text[start:end]:
                    start += 1
                elif text[end - 1] == ")" and "(" not in text[start:end]:
                    end -= 1
                if any(s <= start and end <= e for s, e in claimed):
                    continue
                raw = text[start:end]
                if _is_lookalike(text, start, end, raw):
                    continue
                digits = "".join(_DIGIT.findall(raw))
                if raw.lstrip("(").startswith("+") or digits.startswith("00"):
                    # International: the region does not matter ("ZZ": none).
                    candidates: tuple[str, ...] = (regions[0] if regions else "ZZ",)
                else:
                    compact = _COMPACT.fullmatch(raw) is not None
                    if compact and not _PHONE_WORD.search(text, max(0, start - 32), start):
                        continue
                    # A region after the first without a national prefix (Luxembourg for
                    # French, Andorra for Catalan) takes 4- to 11-digit numbers: a bare
                    # run is read in it only when written in groups.
                    candidates = tuple(
                        r for i, r in enumerate(regions)
                        if _could_be(digits, r) and not (compact and i and not _lengths(r)[1])
                    )
                # The matcher reads only the candidate: context is judged above, and every
                # character it is given costs (a call is ~100-200 µs).
                for region in candidates:
                    found = next(iter(phonenumbers.PhoneNumberMatcher(
                        raw, region, leniency=phonenumbers.Leniency.STRICT_GROUPING
                    )), None)
                    if found is not None and found.end - found.start == len(raw):
                        yield start, end
                        break
