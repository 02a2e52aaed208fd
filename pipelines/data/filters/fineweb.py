"""FineWeb's own quality rules (Penedo et al. 2024), as datatrove's FineWebQualityFilter applies them.

Over the non-blank lines (split on "\\n", not stripped), first failure wins:
  line_punct_ratio   fewer than 12 % of lines end in sentence-terminal punctuation
                     (Unicode Sentence_Terminal, so "." "!" "?" "。" ... but not "…" or ":")
  short_line_ratio   more than 67 % of lines are at most 30 characters long
  char_dup_ratio     characters in lines repeating an earlier line exceed 1 % of the text's
                     characters (newlines not counted)
  new_line_ratio     more than 0.3 newlines per word (datatrove calls it "list_ratio")
A text without non-blank lines is dropped as fineweb:empty.
"""

from __future__ import annotations

from pipelines.config import FineWebConfig
from pipelines.data.filters.text import TERMINAL_PUNCTUATION, TextView, duplicate_stats

NAME = "fineweb"
RULES = ("empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "new_line_ratio")
REASONS = tuple(f"{NAME}:{r}" for r in RULES)


class FineWeb:
    def __init__(self, cfg: FineWebConfig) -> None:
        self.cfg = cfg
        self.terminal = TERMINAL_PUNCTUATION

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        cfg = self.cfg
        lines = view.nonblank_lines
        if not lines:
            return False, f"{NAME}:empty"
        n_lines = len(lines)

        # All terminal marks are single code points, so a set lookup of the last character
        # replaces datatrove's endswith() over a tuple of ~160 strings.
        terminal = self.terminal
        ratio = sum(1 for ln in lines if ln[-1] in terminal) / n_lines
        if ratio < cfg.line_punct_thr and not (ratio == 0 and cfg.line_punct_exclude_zero):
            return False, f"{NAME}:line_punct_ratio"

        short = cfg.short_line_length
        if sum(1 for ln in lines if len(ln) <= short) / n_lines > cfg.short_line_thr:
            return False, f"{NAME}:short_line_ratio"

        text = view.text
        n_newlines = text.count("\n")
        # Non-blank lines exist, so there is at least one character besides newlines.
        _, dup_chars = duplicate_stats(lines)
        if dup_chars / (len(text) - n_newlines) > cfg.char_duplicates_ratio:
            return False, f"{NAME}:char_dup_ratio"

        # Every non-space character belongs to some token, so there is at least one word.
        if n_newlines / view.n_words > cfg.new_line_ratio:
            return False, f"{NAME}:new_line_ratio"
        return True, None
