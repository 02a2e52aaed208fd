"""Gopher's repetition rules (Rae et al. 2021, appendix A1), as datatrove implements them.

Rules, in datatrove's order (first failure wins); character fractions divide by len(text):
  dup_para_frac / dup_para_char_frac   paragraphs (blank-line separated) equal to an earlier one
  dup_line_frac / dup_line_char_frac   lines equal to an earlier one
  top_{n}_gram      characters of the most frequent word n-gram (n = 2, 3, 4) times its count
  dup_{n}_gram      characters inside repeated word n-grams (n = 5 .. 10), counted greedily

Speed, without changing results:
  * n-grams are tuples of tokens (C-level `zip`, hashes of the words are cached), not
    joined strings;
  * the greedy duplicate scan only visits positions whose n-gram occurs more than once
    anywhere: at every other position datatrove's loop just records the n-gram (which
    no later position can match) and moves on;
  * if no 5-gram repeats, no longer n-gram can, so n = 6 .. 10 are skipped.
Deliberate difference: datatrove keys the duplicate n-grams by "".join(words), so ("ab", "c")
and ("a", "bc") collide; tuples do not. Character counts are the same (word lengths, no
separators) as datatrove's.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate, compress
from operator import itemgetter

from pipelines.config import GopherRepetitionConfig
from pipelines.filters.text import TextView, duplicate_stats

NAME = "gopher_repetition"
_DEFAULT = GopherRepetitionConfig()


def rules(cfg: GopherRepetitionConfig = _DEFAULT) -> tuple[str, ...]:
    """Rule names for a config (the n-gram rules are named after their n)."""
    return (
        "empty",
        "dup_para_frac",
        "dup_para_char_frac",
        "dup_line_frac",
        "dup_line_char_frac",
        *(f"top_{int(n)}_gram" for n, _ in cfg.top_n_grams),
        *(f"dup_{int(n)}_gram" for n, _ in cfg.dup_n_grams),
    )


REASONS = tuple(f"{NAME}:{r}" for r in rules())
_COUNT = itemgetter(1)


def ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(words[i:] for i in range(n))))


def top_ngram_chars(words: list[str], n: int) -> int:
    """len(" ".join(g)) * count for the most frequent n-gram g; ties go to the n-gram seen
    first (Counter keeps insertion order and max() returns the first maximum, which is
    what datatrove's `most_common(1)` picks). 0 if there are fewer than n words."""
    counts = Counter(zip(*(words[i:] for i in range(n))))
    if not counts:
        return 0
    gram, count = max(counts.items(), key=_COUNT)
    return (sum(map(len, gram)) + n - 1) * count


def duplicate_ngram_chars(words: list[str], n: int, prefix: list[int]) -> int:
    """Characters (word lengths, no separators) in n-grams that repeat an earlier n-gram,
    scanning left to right and jumping past each repeat, as datatrove does.

    `prefix[i]` is the total length of words[:i].
    """
    grams = ngrams(words, n)
    counts = Counter(grams)
    if len(counts) == len(grams):
        return 0
    # Positions whose n-gram occurs more than once (all C-level: map/compress).
    candidates = compress(range(len(grams)), map((1).__lt__, map(counts.__getitem__, grams)))
    seen: set[tuple[str, ...]] = set()
    repeated = 0
    resume = 0  # the scan continues here after jumping over a repeat
    for i in candidates:
        if i < resume:
            continue
        gram = grams[i]
        if gram in seen:
            repeated += prefix[i + n] - prefix[i]
            resume = i + n
        else:
            seen.add(gram)
    return repeated


class GopherRepetition:
    def __init__(self, cfg: GopherRepetitionConfig) -> None:
        self.cfg = cfg
        self.top_n = [(int(n), float(frac)) for n, frac in cfg.top_n_grams]
        self.dup_n = [(int(n), float(frac)) for n, frac in cfg.dup_n_grams]

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        cfg = self.cfg
        text = view.text
        if not text:
            return False, f"{NAME}:empty"
        n_chars = len(text)

        paragraphs = view.paragraphs
        dups, dup_chars = duplicate_stats(paragraphs)
        if cfg.dup_para_frac is not None and dups / len(paragraphs) > cfg.dup_para_frac:
            return False, f"{NAME}:dup_para_frac"
        if cfg.dup_para_char_frac is not None and dup_chars / n_chars > cfg.dup_para_char_frac:
            return False, f"{NAME}:dup_para_char_frac"

        lines = view.line_runs
        dups, dup_chars = duplicate_stats(lines)
        if cfg.dup_line_frac is not None and dups / len(lines) > cfg.dup_line_frac:
            return False, f"{NAME}:dup_line_frac"
        if cfg.dup_line_char_frac is not None and dup_chars / n_chars > cfg.dup_line_char_frac:
            return False, f"{NAME}:dup_line_char_frac"

        words = view.words
        for n, frac in self.top_n:
            if top_ngram_chars(words, n) / n_chars > frac:
                return False, f"{NAME}:top_{n}_gram"

        if self.dup_n:
            prefix = list(accumulate(map(len, words), initial=0))
            unique_from = len(words) + 1  # every n-gram at least this long occurs once
            for n, frac in self.dup_n:
                if n >= unique_from:
                    continue
                repeated = duplicate_ngram_chars(words, n, prefix)
                if repeated / n_chars > frac:
                    return False, f"{NAME}:dup_{n}_gram"
                if repeated == 0:
                    # No n-gram repeats, so no longer one can (it would contain a repeat).
                    unique_from = min(unique_from, n)
        return True, None
