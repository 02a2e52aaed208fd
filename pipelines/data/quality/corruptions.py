"""Corruptions made from the corpus itself: the learned quality signal's made-up negatives.

Each takes a good page and destroys one thing a reader needs while keeping what the rules
measure (words, their lengths and frequencies, stop words, lines), so only word order tells
copy from page: `shuffled_words`, `shuffled_sentences`, `cut_lines` and `mixed_languages`
(`cut_lines` when there is no foreign text). A page with nothing to reorder comes back
unchanged, and `training_set` leaves such copies out. Each kind:
docs/learned-quality.md#how-it-learns.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from pipelines.data.filters.text import sentence_spans

SHUFFLED_WORDS = "shuffled_words"
SHUFFLED_SENTENCES = "shuffled_sentences"
CUT_LINES = "cut_lines"
MIXED_LANGUAGES = "mixed_languages"
CORRUPTIONS = (SHUFFLED_WORDS, SHUFFLED_SENTENCES, CUT_LINES, MIXED_LANGUAGES)

CUT_MIN, CUT_MAX = 2, 6  # words per cut-up run
_RESHUFFLES = 8  # tries at an order other than the page's own before giving up


def _pour(units: list[str], counts: list[int], sep: str = " ") -> str:
    """`units` in order, `counts[i]` of them on line i (0: a blank line)."""
    it = iter(units)
    return "\n".join(sep.join(next(it) for _ in range(n)) for n in counts)


def _shuffle_other(units: list[str], rng: random.Random) -> list[str]:
    """`units` shuffled into an order that differs from theirs where one exists."""
    out = list(units)
    for _ in range(_RESHUFFLES):
        rng.shuffle(out)
        if out != units:
            break
    return out


def _sentences(line: str) -> list[str]:
    return [line[a:b] for a, b in sentence_spans(line)]


def shuffled_words(text: str, rng: random.Random) -> str:
    """The page's words (whitespace-separated, punctuation attached) shuffled across the
    page; line i keeps its word count, runs of whitespace become one space."""
    lines = [line.split() for line in text.split("\n")]
    words = [w for line in lines for w in line]
    return _pour(_shuffle_other(words, rng), [len(line) for line in lines])


def shuffled_sentences(text: str, rng: random.Random) -> str:
    """The page's sentences shuffled across the page; line i keeps its number of sentences."""
    lines = [_sentences(line) for line in text.split("\n")]
    units = [s for line in lines for s in line]
    return _pour(_shuffle_other(units, rng), [len(line) for line in lines])


def cut_lines(text: str, rng: random.Random) -> str:
    """Every line cut into runs of CUT_MIN..CUT_MAX words (a line's last run may be
    shorter), the runs shuffled across the page; line i keeps its number of runs."""
    counts: list[int] = []
    runs: list[str] = []
    for line in text.split("\n"):
        words, n = line.split(), 0
        while words:
            k = rng.randint(CUT_MIN, CUT_MAX)
            runs.append(" ".join(words[:k]))
            words, n = words[k:], n + 1
        counts.append(n)
    return _pour(_shuffle_other(runs, rng), counts)


def mixed_languages(text: str, rng: random.Random, foreign: Sequence[str]) -> str:
    """Each sentence of the page followed by a sentence of one foreign text (chosen by
    `rng`, read in order from a random start, around again when it runs out); the
    foreign sentences go on the line of the sentence they follow. No foreign text, or a
    blank one chosen: `cut_lines`."""
    if not foreign:
        return cut_lines(text, rng)
    source = [s for line in rng.choice(foreign).split("\n") for s in _sentences(line)]
    if not source:
        return cut_lines(text, rng)
    start = rng.randrange(len(source))
    out, i = [], 0
    for line in text.split("\n"):
        units = []
        for s in _sentences(line):
            units += [s, source[(start + i) % len(source)]]
            i += 1
        out.append(" ".join(units))
    return "\n".join(out)


_SIMPLE: dict[str, Callable[[str, random.Random], str]] = {
    SHUFFLED_WORDS: shuffled_words, SHUFFLED_SENTENCES: shuffled_sentences, CUT_LINES: cut_lines,
}


def corrupt(text: str, kind: str, rng: random.Random, foreign: Sequence[str] = ()) -> str:
    """`text` corrupted by `kind` (one of CORRUPTIONS), deterministic in `rng`'s state;
    `foreign` is only read by mixed_languages."""
    if kind == MIXED_LANGUAGES:
        return mixed_languages(text, rng, foreign)
    if kind not in _SIMPLE:
        raise ValueError(f"unknown corruption {kind!r}; choose one of {CORRUPTIONS}")
    return _SIMPLE[kind](text, rng)
