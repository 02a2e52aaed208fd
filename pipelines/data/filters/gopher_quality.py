"""Gopher's quality rules as published (Rae et al. 2021, appendix A1).

Length, mean word length, "#" and ellipses per word, bullet and ellipsis lines, alphabetic
words and stop words; first failure wins. Words are whitespace-separated, as the paper
defines them, not datatrove's tokenizer tokens, which count every punctuation run and drop
most good technical pages under the 80 % alphabetic line; stop words are matched lowercased
among the tokens. A threshold of None disables its rule (0 is a real threshold); a ratio
over zero words is NaN and drops nothing. Thresholds and the differences from datatrove:
docs/data.md#the-rules-one-by-one.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import filterfalse

from pipelines.config import GopherQualityConfig
from pipelines.data.filters.rules import NAN, DropIf, RuleSpec, fails, ratio
from pipelines.data.filters.text import TextView

NAME = "gopher_quality"
RULES = (
    "min_doc_words",
    "max_doc_words",
    "min_avg_word_length",
    "max_avg_word_length",
    "hash_word_ratio",
    "ellipsis_word_ratio",
    "bullet_lines_ratio",
    "ellipsis_lines_ratio",
    "alpha_words_ratio",
    "min_stop_words",
)
REASONS = tuple(f"{NAME}:{r}" for r in RULES)

_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")


def _has_alpha(word: str) -> bool:
    return any(map(str.isalpha, word))


class _Doc:
    """The measures of one document; words are split once, the rest on demand."""

    __slots__ = ("n", "stop_words", "view", "words")

    def __init__(self, view: TextView, stop_words: frozenset[str]) -> None:
        self.view = view
        self.words = view.ws_words
        self.n = len(self.words)
        self.stop_words = stop_words

    def n_words(self) -> float:
        return float(self.n)

    def avg_word_length(self) -> float:
        return ratio(sum(map(len, self.words)), self.n)

    def hash_ratio(self) -> float:
        return ratio(self.view.text.count("#"), self.n)

    def ellipsis_ratio(self) -> float:
        text = self.view.text
        return ratio(text.count("...") + text.count("…"), self.n)

    def bullet_lines(self) -> float:
        lines = self.view.lines
        return ratio(sum(1 for ln in lines if ln.lstrip().startswith(_BULLETS)), len(lines))

    def ellipsis_lines(self) -> float:
        lines, text = self.view.lines, self.view.text
        if not lines or ("..." not in text and "…" not in text):
            return 0.0 if lines else NAN
        return sum(1 for ln in lines if ln.rstrip().endswith(_ELLIPSES)) / len(lines)

    def alpha_ratio(self) -> float:
        # Wholly alphabetic words are counted in C; only the others ("17.", "(véase",
        # "/usr/bin") are looked at letter by letter.
        words = self.words
        n_alpha = sum(map(str.isalpha, words))
        n_alpha += sum(map(_has_alpha, filterfalse(str.isalpha, words)))
        return ratio(n_alpha, self.n)

    def stop_words_found(self) -> float:
        lowered = {w.lower() for w in set(self.view.words)}
        return float(len(self.stop_words.intersection(lowered)))


# rule -> (what is measured, drop_if, config field, measure)
_RULES: dict[str, tuple[str, DropIf, str, Callable[[_Doc], float]]] = {
    "min_doc_words": ("whitespace-separated words", "below", "min_doc_words", _Doc.n_words),
    "max_doc_words": ("whitespace-separated words", "above", "max_doc_words", _Doc.n_words),
    "min_avg_word_length": ("mean word length (characters)", "below", "min_avg_word_length",
                            _Doc.avg_word_length),
    "max_avg_word_length": ("mean word length (characters)", "above", "max_avg_word_length",
                            _Doc.avg_word_length),
    "hash_word_ratio": ("'#' per word", "above", "max_symbol_word_ratio", _Doc.hash_ratio),
    "ellipsis_word_ratio": ("'...' or '…' per word", "above", "max_symbol_word_ratio",
                            _Doc.ellipsis_ratio),
    "bullet_lines_ratio": ("share of lines starting with a bullet", "above",
                           "max_bullet_lines_ratio", _Doc.bullet_lines),
    "ellipsis_lines_ratio": ("share of lines ending with an ellipsis", "above",
                             "max_ellipsis_lines_ratio", _Doc.ellipsis_lines),
    "alpha_words_ratio": ("share of words with a letter", "below", "max_non_alpha_words_ratio",
                          _Doc.alpha_ratio),
    "min_stop_words": ("distinct stop words of the language", "below", "min_stop_words",
                       _Doc.stop_words_found),
}  # fmt: skip


def specs(cfg: GopherQualityConfig) -> list[RuleSpec]:
    out = []
    for rule in RULES:
        metric, drop_if, fld, _ = _RULES[rule]
        thr = getattr(cfg, fld) if cfg.enabled else None
        out.append(RuleSpec(f"{NAME}:{rule}", metric, drop_if, None if thr is None else float(thr)))
    return out


class GopherQuality:
    def __init__(self, cfg: GopherQualityConfig, stop_words: frozenset[str]) -> None:
        self.cfg = cfg
        self.stop_words = stop_words
        self.specs = specs(cfg)
        # (reason, drop_if, threshold, measure) of the rules that are on, in order
        self._checks = [(s.reason, s.drop_if, s.threshold, _RULES[s.reason.split(":")[1]][3])
                        for s in self.specs if s.threshold is not None]  # fmt: skip

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        doc = _Doc(view, self.stop_words)
        for reason, drop_if, threshold, measure in self._checks:
            if fails(drop_if, threshold, measure(doc)):
                return False, reason
        return True, None

    def evaluate(self, view: TextView) -> tuple[bool, str | None, dict[str, float]]:
        """The decision of `filter` and every rule's metric (rules that are off included)."""
        doc = _Doc(view, self.stop_words)
        values: dict[str, float] = {}
        reason = None
        for s in self.specs:
            v = values[s.reason] = _RULES[s.reason.split(":")[1]][3](doc)
            if reason is None and fails(s.drop_if, s.threshold, v):
                reason = s.reason
        return reason is None, reason, values
