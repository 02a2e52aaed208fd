"""Cheap views of one text that tell the detectors where to look.

Every page of the corpus goes through the redactor and most hold no personal data, so the
cost that matters is that of a clean page. A regular expression that starts with a
character class (a digit, a letter) is tried at every position and costs about 25 ns a
character in CPython's `re`; a literal search is about ten times faster, and
`bytes.translate` faster still. So the text is encoded once to Latin-1 bytes (one byte a
character, characters beyond Latin-1 become "?", offsets unchanged), translated into
class strings (every digit a "0", every word character a "w", upper case letters "A"...),
and the class strings are searched for literals: digit clusters, runs of 20 word
characters (keys), a codice fiscale's shape "AAAAAA00A00A000A", "w:w" and "::" (IPv6),
keyword stems in the lower-cased bytes, "PRIVATE KEY", "@". The detectors then run
their real patterns and checks only in small windows around those places.
"""

from __future__ import annotations

import re
from functools import cached_property

_DIGITS = bytes.maketrans(b"0123456789", b"0" * 10)
_WORD_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_WORD = bytes.maketrans(_WORD_CHARS, b"w" * len(_WORD_CHARS))
_SHAPE = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    b"A" * 26 + b"a" * 26 + b"0" * 10,
)
# ASCII and Latin-1 capitals to lower case (the Latin-1 block is offset by 32 too; the
# multiplication sign 0xD7 is not a letter and stays).
_UPPER = bytes(range(0x41, 0x5B)) + bytes(range(0xC0, 0xD7)) + bytes(range(0xD8, 0xDF))
_LOWER = bytes.maketrans(_UPPER, bytes(b + 32 for b in _UPPER))

# A run of at least four digits with at most three separators between two of them:
# "612 34 56 78", "(+33) 6 12", "12.345.678-Z", "ES91 2100 0418", "8.8.8.8". Every kind
# with digits has four; section numbers ("2.2") and years are not even returned.
_CLUSTER = re.compile(rb"0(?:[ .\-/()\xa0]{0,3}0){3,}")

Window = tuple[int, int]


def merge(windows: list[Window]) -> list[Window]:
    """Overlapping or touching windows joined, in order."""
    out: list[Window] = []
    for lo, hi in sorted(windows):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _runs(haystack: bytes, needle: bytes) -> list[Window]:
    """(start, end) of each maximal run of `needle`'s byte at least len(needle) long."""
    out: list[Window] = []
    ch = needle[:1]
    i = haystack.find(needle)
    while i != -1:
        j = i + len(needle)
        while j < len(haystack) and haystack[j:j + 1] == ch:
            j += 1
        out.append((i, j))
        i = haystack.find(needle, j)
    return out


def find_all(haystack: bytes, needle: bytes) -> list[int]:
    """Every offset where `needle` starts (non-overlapping)."""
    out: list[int] = []
    i = haystack.find(needle)
    while i != -1:
        out.append(i)
        i = haystack.find(needle, i + len(needle))
    return out


class Scan:
    """One text and its class strings, each computed on first use."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw = text.encode("latin-1", "replace")

    @cached_property
    def digits(self) -> bytes:
        return self.raw.translate(_DIGITS)

    @cached_property
    def clusters(self) -> list[tuple[int, int, int]]:
        """(start, end, number of digits) of each digit cluster."""
        d = self.digits
        return [(m.start(), m.end(), d.count(b"0", m.start(), m.end())) for m in _CLUSTER.finditer(d)]

    def digit_windows(self, min_digits: int, before: int = 64, after: int = 24) -> list[Window]:
        """Windows around the digit clusters that hold at least `min_digits` digits."""
        n = len(self.text)
        return merge([(max(0, s - before), min(n, e + after))
                      for s, e, k in self.clusters if k >= min_digits])

    @cached_property
    def words(self) -> bytes:
        return self.raw.translate(_WORD)

    def word_runs(self, length: int) -> list[Window]:
        """Runs of at least `length` characters of [A-Za-z0-9_-] (keys, tokens, hashes)."""
        return _runs(self.words, b"w" * length)

    @cached_property
    def shape(self) -> bytes:
        """Capitals "A", small letters "a", digits "0", anything else as it is."""
        return self.raw.translate(_SHAPE)

    @cached_property
    def lower(self) -> bytes:
        return self.raw.translate(_LOWER)

    def around(self, offsets: list[int], before: int, after: int) -> list[Window]:
        n = len(self.text)
        return merge([(max(0, i - before), min(n, i + after)) for i in offsets])
