"""Bank account and payment card numbers, kept only when their checksums hold.

IBANs of any country, compact or grouped: valid when stdnum.iban agrees (mod 97-10 and the
registry's length and BBAN structure). Cards: 13 to 19 digits, compact or grouped by one
kind of separator, passing Luhn and starting with an issuer prefix of that length, since
one random digit string in ten passes Luhn alone. Details:
docs/personal-data.md#how-each-kind-is-found.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from stdnum import iban, luhn

from pipelines.data.pii.scan import Scan

_IBAN = re.compile(
    r"\b[A-Z]{2}\d{2}(?:[ \-]?[A-Z0-9]{4}){2,7}(?:[ \-]?[A-Z0-9]{1,3})?\b", re.ASCII
)
_CARD = re.compile(
    r"(?<![\w.,\-])(?<!\d[ \-])"
    r"(?:\d{4}([ \-])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{4}([ \-])\d{6}\2\d{4,5}|\d{13,19})"
    r"(?![\w\-]|[.,]\d|[ \-]\d{1,4}(?![\d/]))",
    re.ASCII,
)

# A grouped number inside a longer run of groups (an IBAN with a wrong check, a table of
# figures) is not a card: no digit group may touch it on either side (an expiry date
# "12/26" after it may).
# Issuer prefixes (IIN ranges) and the lengths their cards have.
_BRANDS: tuple[tuple[tuple[int, int], int, tuple[int, ...]], ...] = (
    ((4, 4), 1, (13, 16, 19)),  # Visa
    ((51, 55), 2, (16,)),  # Mastercard
    ((2221, 2720), 4, (16,)),  # Mastercard 2-series
    ((34, 34), 2, (15,)),  # Amex
    ((37, 37), 2, (15,)),
    ((6011, 6011), 4, (16, 17, 18, 19)),  # Discover
    ((644, 649), 3, (16, 17, 18, 19)),
    ((65, 65), 2, (16, 17, 18, 19)),
    ((3528, 3589), 4, (16, 17, 18, 19)),  # JCB
    ((300, 305), 3, (14, 16, 17, 18, 19)),  # Diners Club
    ((36, 36), 2, (14, 16, 17, 18, 19)),
    ((38, 39), 2, (16, 17, 18, 19)),
    ((62, 62), 2, (16, 17, 18, 19)),  # UnionPay
    ((50, 50), 2, tuple(range(12, 20))),  # Maestro
    ((56, 58), 2, tuple(range(12, 20))),
    ((67, 67), 2, tuple(range(12, 20))),
)


def plausible_card(digits: str) -> bool:
    """A known issuer's prefix at a length it issues, and a valid Luhn check digit."""
    if len(set(digits)) < 3:  # 0000 0000 0000 0000 and friends
        return False
    for (lo, hi), width, lengths in _BRANDS:
        if len(digits) in lengths and lo <= int(digits[:width]) <= hi:
            return luhn.is_valid(digits)
    return False


def find_ibans(scan: Scan) -> Iterator[tuple[int, int]]:
    """(start, end) of each IBAN in the text."""
    text = scan.text
    for lo, hi in scan.digit_windows(8, before=40, after=8):
        for m in _IBAN.finditer(text, lo, hi):
            raw = m.group()
            # The whole match, then one group shorter at a time ("... 1332 EN" ran into a
            # word), never below the shortest IBAN (15 characters, Norway).
            cuts = [len(raw)] + [i for i in range(len(raw) - 1, 14, -1) if raw[i] in " -"]
            for cut in cuts:
                if iban.is_valid(raw[:cut], check_country=False):
                    yield m.start(), m.start() + cut
                    break


def find_cards(scan: Scan) -> Iterator[tuple[int, int]]:
    """(start, end) of each payment card number in the text."""
    text = scan.text
    for lo, hi in scan.digit_windows(13, before=4, after=8):
        for m in _CARD.finditer(text, lo, hi):
            if plausible_card(m.group().replace(" ", "").replace("-", "")):
                yield m.start(), m.end()
