"""Gopher's quality rules (Rae et al. 2021, appendix A1), as datatrove implements them.

Rules, in datatrove's order (first failure wins):
  min/max_doc_words       number of non-symbol words outside [50, 100000]
  min/max_avg_word_length mean length of non-symbol words outside [3, 10]
  hash_word_ratio         "#" per word above 0.1
  ellipsis_word_ratio     "..." or "…" per word above 0.1
  bullet_lines_ratio      more than 90 % of lines start with "•" or "-"
  ellipsis_lines_ratio    more than 30 % of lines end with "..." or "…"
  alpha_words_ratio       fewer than 80 % of words contain a letter
  min_stop_words          fewer than 2 distinct stop words of the language

A threshold of None disables its rule (datatrove also disables on 0; here 0 is a real
threshold). "Words" are the tokens of `TextView.words`, punctuation runs included, exactly
as datatrove counts its tokenizer's output; the ratios divide by all tokens.
"""

from __future__ import annotations

import re
from itertools import filterfalse

from pipelines.config import GopherQualityConfig
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

# [^\W_] is exactly str.isalnum() for one character.
_HAS_ALNUM = re.compile(r"[^\W_]").search
_BULLETS = ("•", "-")
_ELLIPSES = ("...", "…")


def _has_alpha(word: str) -> bool:
    return any(map(str.isalpha, word))


class GopherQuality:
    def __init__(self, cfg: GopherQualityConfig, stop_words: frozenset[str]) -> None:
        self.cfg = cfg
        self.stop_words = stop_words

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        cfg = self.cfg
        text = view.text
        words = view.words
        n_words = len(words)

        # Non-symbol words: tokens with at least one letter or digit. Most tokens are wholly
        # alphanumeric (one C-level pass counts them); only the rest are looked at closely.
        # datatrove instead tests membership in a fixed punctuation list, which misses
        # symbols such as "¿", "¡", "©", "•" and so counts them as words.
        rest = list(filterfalse(str.isalnum, words))
        content_rest = list(filter(_HAS_ALNUM, rest))
        n_content = n_words - len(rest) + len(content_rest)

        if cfg.min_doc_words is not None and n_content < cfg.min_doc_words:
            return False, f"{NAME}:min_doc_words"
        if cfg.max_doc_words is not None and n_content > cfg.max_doc_words:
            return False, f"{NAME}:max_doc_words"

        if n_content:  # datatrove: mean of nothing is NaN, which fails no comparison
            content_chars = sum(map(len, words)) - sum(map(len, rest)) + sum(map(len, content_rest))
            avg_len = content_chars / n_content
            if cfg.min_avg_word_length is not None and avg_len < cfg.min_avg_word_length:
                return False, f"{NAME}:min_avg_word_length"
            if cfg.max_avg_word_length is not None and avg_len > cfg.max_avg_word_length:
                return False, f"{NAME}:max_avg_word_length"

        # Ratios per token; a document without tokens has nothing to measure (datatrove
        # divides by zero there).
        if n_words and cfg.max_symbol_word_ratio is not None:
            if text.count("#") / n_words > cfg.max_symbol_word_ratio:
                return False, f"{NAME}:hash_word_ratio"
            if (text.count("...") + text.count("…")) / n_words > cfg.max_symbol_word_ratio:
                return False, f"{NAME}:ellipsis_word_ratio"

        lines = view.lines
        if lines:
            n_lines = len(lines)
            if cfg.max_bullet_lines_ratio is not None:
                bullets = sum(1 for ln in lines if ln.lstrip().startswith(_BULLETS))
                if bullets / n_lines > cfg.max_bullet_lines_ratio:
                    return False, f"{NAME}:bullet_lines_ratio"
            if cfg.max_ellipsis_lines_ratio is not None and ("..." in text or "…" in text):
                trailing = sum(1 for ln in lines if ln.rstrip().endswith(_ELLIPSES))
                if trailing / n_lines > cfg.max_ellipsis_lines_ratio:
                    return False, f"{NAME}:ellipsis_lines_ratio"

        # Config name kept from datatrove: the rule is "at least this share of words has a
        # letter". Wholly alphabetic tokens are counted in C, symbols have no letter, and
        # the few remaining tokens are looked at one by one.
        if n_words and cfg.max_non_alpha_words_ratio is not None:
            n_alpha = sum(map(str.isalpha, words))
            # Other tokens with a letter are alphanumeric ones that are not plain numbers
            # ("mp3", "x86"), or non-alphanumeric ones with a letter ("foo_bar").
            mixed = filterfalse(str.isdecimal, filterfalse(str.isalpha, filter(str.isalnum, words)))
            n_alpha += sum(map(_has_alpha, mixed)) + sum(map(_has_alpha, content_rest))
            if n_alpha / n_words < cfg.max_non_alpha_words_ratio:
                return False, f"{NAME}:alpha_words_ratio"

        if (
            cfg.min_stop_words is not None
            and len(self.stop_words.intersection(words)) < cfg.min_stop_words
        ):
            return False, f"{NAME}:min_stop_words"

        return True, None
