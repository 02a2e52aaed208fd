"""Corruptions made from the corpus itself: the learned quality signal's made-up negatives.

Each takes a good page and destroys one thing a reader needs while keeping what the
heuristic rules measure (the words, their lengths and frequencies, the stop words, the
lines), so that the only way to tell the copy from its page is the order of its words:

    shuffled_words      every word of the page moved anywhere in it (word salad, spun spam);
                        the lines keep their word counts
    shuffled_sentences  the page's sentences in another order, each sentence intact
    cut_lines           the lines cut into runs of 2-6 words, the runs shuffled across the
                        page (the cut-up technique; broken extractions, spliced spam): most
                        word pairs survive, the joins between runs do not
    mixed_languages     the page's sentences interleaved one for one with sentences of a
                        foreign text (another-language document the corpus holds, such as
                        a language-ID rejection); with no foreign text, cut_lines instead,
                        the corruption closest to it (a page spliced from pieces that do
                        not belong together)

A "sentence" is a sentence of one line (`pipelines.data.filters.text.sentence_spans`): a
heading or a list item without a full stop is a sentence of its own, and the layout (which
line holds how many units, the blank lines) is kept. A page with fewer than two distinct
units comes back unchanged from shuffled_sentences: there is nothing to reorder, and
`training_set` leaves such copies out (a copy equal to its page would teach that the page
is bad).
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
