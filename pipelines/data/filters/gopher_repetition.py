"""Gopher's repetition rules (Rae et al. 2021, appendix A1), as datatrove implements them.

Repeated paragraphs and lines, the most frequent word 2-4-grams and the characters inside
repeated 5-10-grams; first failure wins. The n-gram rules dominate the filters' cost, so
`NgramIndex` counts them with exact integer keys in numpy, visiting only n-grams that can
repeat, where datatrove joins strings (whose keys let ("ab", "c") and ("a", "bc") collide;
here they do not). `heading_repeats` > 0 lets a heading repeat that often first (see
fineweb.py). The rules: docs/data.md#the-rules-one-by-one.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from pipelines.config import GopherRepetitionConfig
from pipelines.data.filters.rules import NAN, RuleSpec, fails
from pipelines.data.filters.text import TERMINAL_PUNCTUATION, TextView, duplicate_stats

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


def specs(cfg: GopherRepetitionConfig) -> list[RuleSpec]:
    on = cfg.enabled

    def spec(rule: str, metric: str, thr: float | None) -> RuleSpec:
        drop_if = "flag" if rule == "empty" else "above"
        return RuleSpec(f"{NAME}:{rule}", metric, drop_if, None if thr is None or not on else float(thr))

    return [
        spec("empty", "the text is empty", 1.0),
        spec("dup_para_frac", "share of paragraphs repeating an earlier one", cfg.dup_para_frac),
        spec("dup_para_char_frac", "share of characters in repeated paragraphs", cfg.dup_para_char_frac),
        spec("dup_line_frac", "share of lines repeating an earlier one", cfg.dup_line_frac),
        spec("dup_line_char_frac", "share of characters in repeated lines", cfg.dup_line_char_frac),
        *(spec(f"top_{int(n)}_gram", f"share of characters in the most frequent word {int(n)}-gram", f)
          for n, f in cfg.top_n_grams),
        *(spec(f"dup_{int(n)}_gram", f"share of characters in repeated word {int(n)}-grams", f)
          for n, f in cfg.dup_n_grams),
    ]  # fmt: skip


class NgramIndex:
    """The repeated word n-grams of one document, built level by level.

    Words get integer ids; the n-gram at position i is identified by the pair
    (class of the (n-1)-gram at i, id of word i + n - 1), packed into one int64 and ranked
    with `np.unique`, whose ranks are the classes of level n. No hashing, so no collisions.
    An n-gram can only repeat where its (n-1)-gram repeats, so level n only looks at the
    positions kept by level n-1 (a small part of most documents), and its counts are still
    exact: every occurrence of a repeated n-gram is among those positions.
    """

    def __init__(self, words: list[str]) -> None:
        n_words = len(words)
        vocab = dict.fromkeys(words)  # distinct words in first-seen order, built in C
        self.vocab_size = max(len(vocab), 1)
        vocab = dict(zip(vocab, range(len(vocab))))
        self.ids = np.fromiter(map(vocab.__getitem__, words), np.int64, n_words)
        self.n_words = n_words
        # prefix[i] = total length of words[:i] (datatrove's len("".join(words[:i])))
        self.prefix = list(accumulate(map(len, words), initial=0))
        # Level 1: positions of words that occur more than once, classed by word id. Ids
        # follow first occurrence, so the smallest id among the most frequent words is
        # the one seen first.
        counts = np.bincount(self.ids, minlength=1)
        top = None
        if n_words and counts.max() > 1:
            top_id = int(np.flatnonzero(counts == counts.max())[0])
            top = (int(counts[top_id]), int(np.argmax(self.ids == top_id)))
        positions = np.flatnonzero(counts[self.ids] > 1)
        self._levels: dict[int, _Level] = {1: _Level(positions, self.ids[positions], top)}

    def level(self, n: int) -> _Level:
        found = self._levels.get(n)
        if found is not None:
            return found
        prev = self.level(n - 1)
        last = self.n_words - n  # last position where an n-gram starts
        positions = prev.positions[: np.searchsorted(prev.positions, last, side="right")]
        if len(positions) < 2:
            level = _Level(positions[:0], positions[:0], None)
        else:
            cut = prev.classes[: len(positions)]
            # classes < len(positions) and ids < vocab_size, both at most n_words: no overflow.
            keys = cut * self.vocab_size + self.ids[positions + (n - 1)]
            _, first, classes, counts = np.unique(
                keys, return_index=True, return_inverse=True, return_counts=True
            )
            top_count = int(counts.max())
            if top_count < 2:
                level = _Level(positions[:0], positions[:0], None)
            else:
                # Most frequent n-gram, ties to the one seen first (np.unique's first
                # indices come from a stable sort), as datatrove's Counter.most_common(1).
                top_pos = int(positions[first[counts == top_count].min()])
                keep = counts[classes] > 1
                level = _Level(positions[keep], classes[keep], (top_count, top_pos))
        self._levels[n] = level
        return level

    def top_chars(self, n: int) -> int:
        """len(" ".join(g)) * count for the most frequent n-gram g (the first n-gram, once,
        when none repeats); 0 if there are fewer than n words."""
        if self.n_words < n:
            return 0
        top = self.level(n).top
        count, i = top if top is not None else (1, 0)
        return (self.prefix[i + n] - self.prefix[i] + n - 1) * count

    def duplicate_chars(self, n: int) -> int:
        """Characters (word lengths, no separators) in n-grams that repeat an earlier
        n-gram, scanning left to right and jumping past each repeat, as datatrove does.
        Only positions of repeated n-grams are visited: at any other position datatrove's
        loop records an n-gram that no later position can match and moves on."""
        if self.n_words < n:
            return 0
        level = self.level(n)
        prefix = self.prefix
        seen: set[int] = set()
        repeated = 0
        resume = 0  # the scan continues here after jumping over a repeat
        for i, cls in zip(level.positions.tolist(), level.classes.tolist()):
            if i < resume:
                continue
            if cls in seen:
                repeated += prefix[i + n] - prefix[i]
                resume = i + n
            else:
                seen.add(cls)
        return repeated


class _Level(NamedTuple):
    positions: np.ndarray  # sorted positions whose n-gram occurs more than once
    classes: np.ndarray  # the n-gram's class at each of those positions
    top: tuple[int, int] | None  # (count, first position) of the most frequent n-gram


def heading_discount(items: list[str], dups: int, chars: int, repeats: int, max_words: int) -> tuple[int, int]:
    """(dups, chars) of `duplicate_stats` less the first `repeats` repeats of each
    heading-like item (at most `max_words` words, no sentence-terminal punctuation at the
    end): a title repeated as breadcrumb and heading is not duplicated content."""
    if not dups or not repeats:
        return dups, chars
    for item, count in Counter(items).items():
        if count > 1:
            stripped = item.strip()
            if stripped and stripped[-1] not in TERMINAL_PUNCTUATION and len(stripped.split()) <= max_words:
                k = min(count - 1, repeats)
                dups -= k
                chars -= k * len(item)
    return dups, chars


class GopherRepetition:
    def __init__(self, cfg: GopherRepetitionConfig) -> None:
        self.cfg = cfg
        self.top_n = [(int(n), float(frac)) for n, frac in cfg.top_n_grams]
        self.dup_n = [(int(n), float(frac)) for n, frac in cfg.dup_n_grams]
        self.specs = specs(cfg)

    def _dups(self, items: list[str]) -> tuple[int, int]:
        cfg = self.cfg
        return heading_discount(items, *duplicate_stats(items), cfg.heading_repeats, cfg.heading_max_words)

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        cfg = self.cfg
        text = view.text
        if not text:
            return False, f"{NAME}:empty"
        n_chars = len(text)

        paragraphs = view.paragraphs
        dups, dup_chars = self._dups(paragraphs)
        if cfg.dup_para_frac is not None and dups / len(paragraphs) > cfg.dup_para_frac:
            return False, f"{NAME}:dup_para_frac"
        if cfg.dup_para_char_frac is not None and dup_chars / n_chars > cfg.dup_para_char_frac:
            return False, f"{NAME}:dup_para_char_frac"

        lines = view.line_runs
        dups, dup_chars = self._dups(lines)
        if cfg.dup_line_frac is not None and dups / len(lines) > cfg.dup_line_frac:
            return False, f"{NAME}:dup_line_frac"
        if cfg.dup_line_char_frac is not None and dup_chars / n_chars > cfg.dup_line_char_frac:
            return False, f"{NAME}:dup_line_char_frac"

        index = NgramIndex(view.words)
        for n, frac in self.top_n:
            if index.top_chars(n) / n_chars > frac:
                return False, f"{NAME}:top_{n}_gram"
        for n, frac in self.dup_n:
            if index.duplicate_chars(n) / n_chars > frac:
                return False, f"{NAME}:dup_{n}_gram"
        return True, None

    def evaluate(self, view: TextView) -> tuple[bool, str | None, dict[str, float]]:
        """The decision of `filter` and every rule's metric (the same expressions, no early
        exit); an empty text measures nothing but its emptiness."""
        text = view.text
        out = {s.reason: NAN for s in self.specs}
        out[f"{NAME}:empty"] = float(not text)
        if text:
            n_chars = len(text)
            paragraphs = view.paragraphs
            dups, dup_chars = self._dups(paragraphs)
            out[f"{NAME}:dup_para_frac"] = dups / len(paragraphs)
            out[f"{NAME}:dup_para_char_frac"] = dup_chars / n_chars
            lines = view.line_runs
            dups, dup_chars = self._dups(lines)
            out[f"{NAME}:dup_line_frac"] = dups / len(lines)
            out[f"{NAME}:dup_line_char_frac"] = dup_chars / n_chars
            index = NgramIndex(view.words)
            for n, _ in self.top_n:
                out[f"{NAME}:top_{n}_gram"] = index.top_chars(n) / n_chars
            for n, _ in self.dup_n:
                out[f"{NAME}:dup_{n}_gram"] = index.duplicate_chars(n) / n_chars
        reason = next((s.reason for s in self.specs if fails(s.drop_if, s.threshold, out[s.reason])), None)
        return reason is None, reason, out
