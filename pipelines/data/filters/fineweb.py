"""FineWeb's own quality rules (Penedo et al. 2024), as datatrove's FineWebQualityFilter applies them.

Over the non-blank lines, first failure wins: too few lines ending a sentence, too many
short lines, too many characters in repeated lines, too many newlines per word (no
non-blank line: `fineweb:empty`). With `heading_repeats` = k > 0 (the `docs` profile) a
heading-like line may repeat k times before it counts as duplicated: a manual names its
section as title, breadcrumb and heading, and at the 1 % threshold that alone drops a page.
Thresholds and the discount: docs/data.md#the-rules-one-by-one.
"""

from __future__ import annotations

from collections import Counter

from pipelines.config import FineWebConfig
from pipelines.data.filters.rules import NAN, RuleSpec, fails, ratio
from pipelines.data.filters.text import TERMINAL_PUNCTUATION, TextView, duplicate_stats

NAME = "fineweb"
RULES = ("empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "new_line_ratio")
REASONS = tuple(f"{NAME}:{r}" for r in RULES)


def specs(cfg: FineWebConfig) -> list[RuleSpec]:
    on = cfg.enabled

    def spec(rule: str, metric: str, drop_if, thr: float) -> RuleSpec:
        return RuleSpec(f"{NAME}:{rule}", metric, drop_if, float(thr) if on else None)

    return [
        spec("empty", "no non-blank line", "flag", 1.0),
        spec("line_punct_ratio", "share of lines ending in terminal punctuation", "below",
             cfg.line_punct_thr),
        spec("short_line_ratio", f"share of lines of at most {cfg.short_line_length} characters",
             "above", cfg.short_line_thr),
        spec("char_dup_ratio", "share of characters in repeated lines (headings discounted)",
             "above", cfg.char_duplicates_ratio),
        spec("new_line_ratio", "newlines per word", "above", cfg.new_line_ratio),
    ]  # fmt: skip


class FineWeb:
    def __init__(self, cfg: FineWebConfig) -> None:
        self.cfg = cfg
        self.terminal = TERMINAL_PUNCTUATION
        self.specs = specs(cfg)

    def _is_heading(self, line: str) -> bool:
        line = line.strip()
        return line[-1] not in self.terminal and len(line.split()) <= self.cfg.heading_max_words

    def dup_chars(self, lines: list[str]) -> int:
        """Characters of lines repeating an earlier line, a heading's first
        `heading_repeats` repeats not counted."""
        dups, chars = duplicate_stats(lines)
        k = self.cfg.heading_repeats
        if not dups or not k:
            return chars
        for line, count in Counter(lines).items():
            if count > 1 and self._is_heading(line):
                chars -= min(count - 1, k) * len(line)
        return chars

    def _punct(self, lines: list[str]) -> float:
        # All terminal marks are single code points, so a set lookup of the last character
        # replaces datatrove's endswith() over a tuple of ~160 strings.
        terminal = self.terminal
        return sum(1 for ln in lines if ln[-1] in terminal) / len(lines)

    def _punct_fails(self, value: float) -> bool:
        cfg = self.cfg
        return fails("below", cfg.line_punct_thr, value) and not (value == 0 and cfg.line_punct_exclude_zero)

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        cfg = self.cfg
        lines = view.nonblank_lines
        if not lines:
            return False, f"{NAME}:empty"
        n_lines = len(lines)
        if self._punct_fails(self._punct(lines)):
            return False, f"{NAME}:line_punct_ratio"
        short = cfg.short_line_length
        if sum(1 for ln in lines if len(ln) <= short) / n_lines > cfg.short_line_thr:
            return False, f"{NAME}:short_line_ratio"
        text = view.text
        n_newlines = text.count("\n")
        # Non-blank lines exist, so there is at least one character besides newlines.
        if self.dup_chars(lines) / (len(text) - n_newlines) > cfg.char_duplicates_ratio:
            return False, f"{NAME}:char_dup_ratio"
        # Every non-space character belongs to some token, so there is at least one word.
        if n_newlines / view.n_words > cfg.new_line_ratio:
            return False, f"{NAME}:new_line_ratio"
        return True, None

    def evaluate(self, view: TextView) -> tuple[bool, str | None, dict[str, float]]:
        """The decision of `filter` and every rule's metric (NaN for an empty text)."""
        lines = view.nonblank_lines
        out = {s.reason: NAN for s in self.specs}
        out[f"{NAME}:empty"] = float(not lines)
        if not lines:
            return False, f"{NAME}:empty", out
        n_lines = len(lines)
        text = view.text
        n_newlines = text.count("\n")
        punct = out[f"{NAME}:line_punct_ratio"] = self._punct(lines)
        short = self.cfg.short_line_length
        out[f"{NAME}:short_line_ratio"] = sum(1 for ln in lines if len(ln) <= short) / n_lines
        out[f"{NAME}:char_dup_ratio"] = self.dup_chars(lines) / (len(text) - n_newlines)
        out[f"{NAME}:new_line_ratio"] = ratio(n_newlines, view.n_words)
        reason = None
        if self._punct_fails(punct):
            reason = f"{NAME}:line_punct_ratio"
        else:
            reason = next((s.reason for s in self.specs[2:] if fails(s.drop_if, s.threshold, out[s.reason])), None)
        return reason is None, reason, out
