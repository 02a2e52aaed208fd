"""One view of a document that all quality filters share, and the tokenizer behind it.

`TextView` splits words, lines and paragraphs once, lazily, the first time a filter asks,
where datatrove re-splits the text in every filter. A token is a run of word characters
or of other non-space characters (`\\w+|[^\\w\\s]+`): punctuation is split off words, as
in the tokenizers FineWeb tuned on, in one C-level `re.findall`, and no token spans two
lines (C4 relies on that, see `TextView.derived`). Scripts that write vowel signs as
combining marks are split at them. Why this tokenizer: docs/data.md#the-rules-one-by-one.
"""

from __future__ import annotations

import re

WORD_RE = re.compile(r"\w+|[^\w\s]+")
# Gopher repetition's units: paragraphs are separated by blank lines, lines by runs of "\n".
PARAGRAPH_SPLIT_RE = re.compile(r"\n{2,}")
LINE_SPLIT_RE = re.compile(r"\n+")

# A sentence ends at a run of terminal punctuation (optionally followed by closing quotes or
# brackets) that is followed by whitespace and more text. No abbreviation list: C4 only asks
# "at least N sentences", where a few extra splits after "p. ej." do not matter.
_SENTENCE_END_RE = re.compile(r"[.!?…。！？｡؟।॥]+[\"'”’»)\]]*(?=\s+\S)")

# Unicode's Sentence_Terminal property (FineWeb's "line ends in punctuation" set), as
# code-point ranges. `…` is not in it, as in FineWeb.
_STERM_RANGES = (
    (0x0021, 0x0021), (0x002E, 0x002E), (0x003F, 0x003F), (0x0589, 0x0589), (0x061D, 0x061F),
    (0x06D4, 0x06D4), (0x0700, 0x0702), (0x07F9, 0x07F9), (0x0837, 0x0837), (0x0839, 0x0839),
    (0x083D, 0x083E), (0x0964, 0x0965), (0x104A, 0x104B), (0x1362, 0x1362), (0x1367, 0x1368),
    (0x166E, 0x166E), (0x1735, 0x1736), (0x17D4, 0x17D5), (0x1803, 0x1803), (0x1809, 0x1809),
    (0x1944, 0x1945), (0x1AA8, 0x1AAB), (0x1B4E, 0x1B4F), (0x1B5A, 0x1B5B), (0x1B5E, 0x1B5F),
    (0x1B7D, 0x1B7F), (0x1C3B, 0x1C3C), (0x1C7E, 0x1C7F), (0x2024, 0x2024), (0x203C, 0x203D),
    (0x2047, 0x2049), (0x2CF9, 0x2CFB), (0x2E2E, 0x2E2E), (0x2E3C, 0x2E3C), (0x2E53, 0x2E54),
    (0x2E60, 0x2E61), (0x3002, 0x3002), (0xA4FF, 0xA4FF), (0xA60E, 0xA60F), (0xA6F3, 0xA6F3),
    (0xA6F7, 0xA6F7), (0xA876, 0xA877), (0xA8CE, 0xA8CF), (0xA92F, 0xA92F), (0xA9C8, 0xA9C9),
    (0xAA5D, 0xAA5F), (0xAAF0, 0xAAF1), (0xABEB, 0xABEB), (0xFE12, 0xFE12), (0xFE15, 0xFE16),
    (0xFE52, 0xFE52), (0xFE56, 0xFE57), (0xFF01, 0xFF01), (0xFF0E, 0xFF0E), (0xFF1F, 0xFF1F),
    (0xFF61, 0xFF61), (0x10A56, 0x10A57), (0x10F55, 0x10F59), (0x10F86, 0x10F89),
    (0x11047, 0x11048), (0x110BE, 0x110C1), (0x11141, 0x11143), (0x111C5, 0x111C6),
    (0x111CD, 0x111CD), (0x111DE, 0x111DF), (0x11238, 0x11239), (0x1123B, 0x1123C),
    (0x112A9, 0x112A9), (0x113D4, 0x113D5), (0x1144B, 0x1144C), (0x115C2, 0x115C3),
    (0x115C9, 0x115D7), (0x11641, 0x11642), (0x1173C, 0x1173E), (0x11944, 0x11944),
    (0x11946, 0x11946), (0x11A42, 0x11A43), (0x11A9B, 0x11A9C), (0x11C41, 0x11C42),
    (0x11EF7, 0x11EF8), (0x11F43, 0x11F44), (0x16A6E, 0x16A6F), (0x16AF5, 0x16AF5),
    (0x16B37, 0x16B38), (0x16B44, 0x16B44), (0x16D6E, 0x16D6F), (0x16E98, 0x16E98),
    (0x1BC9F, 0x1BC9F), (0x1DA88, 0x1DA88),
)  # fmt: skip
TERMINAL_PUNCTUATION: frozenset[str] = frozenset(
    chr(cp) for lo, hi in _STERM_RANGES for cp in range(lo, hi + 1)
)


def tokenize(text: str) -> list[str]:
    """Words and symbol runs of `text`, in order (see the module docstring)."""
    return WORD_RE.findall(text)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`; whitespace between sentences is left out."""
    spans: list[tuple[int, int]] = []
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return spans
    for m in _SENTENCE_END_RE.finditer(text, start):
        spans.append((start, m.end()))
        start = m.end()
        while text[start].isspace():  # the lookahead guarantees more text follows
            start += 1
    spans.append((start, len(text.rstrip())))
    return spans


def count_sentences(text: str) -> int:
    """len(sentence_spans(text)), without building the spans."""
    if not text or text.isspace():
        return 0
    return len(_SENTENCE_END_RE.findall(text)) + 1


class TextView:
    """Lazily computed, cached splits of one document's text.

    Each split reproduces exactly the one datatrove's filter uses for that rule (they are
    not all the same: `splitlines()` also breaks on \\r, \\f, \\x1c ..., `re.split("\\n+")`
    keeps a leading/trailing empty piece), so decisions match.
    """

    __slots__ = ("_line_runs", "_lines", "_n_words", "_nonblank", "_paragraphs", "_words", "_ws_words", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._words: list[str] | None = None
        self._ws_words: list[str] | None = None
        self._n_words: int | None = None
        self._lines: list[str] | None = None
        self._line_runs: list[str] | None = None
        self._paragraphs: list[str] | None = None
        self._nonblank: list[str] | None = None

    @classmethod
    def derived(cls, text: str, n_words: int | None) -> TextView:
        """A view of a text a filter produced by dropping or editing lines (C4); given the
        new word count, the text is not tokenized again just to count (FineWeb's need)."""
        view = cls(text)
        view._n_words = n_words
        return view

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = WORD_RE.findall(self.text)
        return self._words

    @property
    def ws_words(self) -> list[str]:
        """Whitespace-separated words (`str.split()`): Gopher's published "words"."""
        if self._ws_words is None:
            self._ws_words = self.text.split()
        return self._ws_words

    def known_n_words(self) -> int | None:
        """The word count if it is already known (words split or count given), else None."""
        if self._n_words is None and self._words is not None:
            self._n_words = len(self._words)
        return self._n_words

    @property
    def n_words(self) -> int:
        if self._n_words is None:
            self._n_words = len(self.words)
        return self._n_words

    @property
    def lines(self) -> list[str]:
        """`str.splitlines()`: Gopher quality's and C4's lines."""
        if self._lines is None:
            self._lines = self.text.splitlines()
        return self._lines

    @property
    def line_runs(self) -> list[str]:
        """Split on runs of "\\n": Gopher repetition's lines."""
        if self._line_runs is None:
            self._line_runs = LINE_SPLIT_RE.split(self.text)
        return self._line_runs

    @property
    def paragraphs(self) -> list[str]:
        """Split on blank lines after stripping the text: Gopher repetition's paragraphs."""
        if self._paragraphs is None:
            self._paragraphs = PARAGRAPH_SPLIT_RE.split(self.text.strip())
        return self._paragraphs

    @property
    def nonblank_lines(self) -> list[str]:
        """`split("\\n")` without whitespace-only lines: FineWeb's lines (not stripped)."""
        if self._nonblank is None:
            self._nonblank = [ln for ln in self.text.split("\n") if ln and not ln.isspace()]
        return self._nonblank


def duplicate_stats(items: list[str]) -> tuple[int, int]:
    """(number of items equal to an earlier item, total characters of those items).

    Set arithmetic instead of a Python loop: each distinct item counts once as "first
    occurrence", everything else is a duplicate.
    """
    distinct = set(items)
    if len(distinct) == len(items):
        return 0, 0
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))
