"""Heuristic quality filters: Gopher repetition, Gopher quality, C4 and FineWeb rules.

`QualityFilters(cfg).apply(text)` runs them in FineWeb's order, our integrity rules last,
and returns a FilterOutcome(keep, reason, text); the first failing rule wins. `evaluate(text)`
returns the same outcome plus every rule's metric by reason, measured on the view that rule
judges and without stopping at the first failure (NaN: not measurable), for the histograms
and calibration; `rules()` describes each rule (`RuleSpec`). Reasons are "<filter>:<rule>",
listed in REASONS (`reasons(cfg)` for other n-gram sizes); docs/data.md#quality-filters.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines import languages
from pipelines.config import FilterConfig
from pipelines.data.filters import c4, fineweb, gopher_quality, gopher_repetition, integrity
from pipelines.data.filters.c4 import C4, C4Result
from pipelines.data.filters.fineweb import FineWeb
from pipelines.data.filters.gopher_quality import GopherQuality
from pipelines.data.filters.gopher_repetition import GopherRepetition
from pipelines.data.filters.integrity import Integrity
from pipelines.data.filters.rules import NAN, RuleSpec
from pipelines.data.filters.text import TextView, tokenize

__all__ = [
    "C4",
    "NAN",
    "REASONS",
    "C4Result",
    "FilterOutcome",
    "FineWeb",
    "GopherQuality",
    "GopherRepetition",
    "QualityFilters",
    "RuleSpec",
    "TextView",
    "reasons",
    "tokenize",
]

FILTER_ORDER = (gopher_repetition.NAME, gopher_quality.NAME, c4.NAME, fineweb.NAME, integrity.NAME)
REASONS: tuple[str, ...] = (
    *gopher_repetition.REASONS,
    *gopher_quality.REASONS,
    *c4.REASONS,
    *fineweb.REASONS,
    *integrity.REASONS,
)


def reasons(cfg: FilterConfig) -> tuple[str, ...]:
    """Every reason `QualityFilters(cfg)` can return."""
    rep = tuple(
        f"{gopher_repetition.NAME}:{r}" for r in gopher_repetition.rules(cfg.gopher_repetition)
    )
    return (*rep, *gopher_quality.REASONS, *c4.REASONS, *fineweb.REASONS, *integrity.REASONS)


@dataclass
class FilterOutcome:
    keep: bool
    reason: str | None  # None when kept
    # Kept: the text after C4's line removal. Dropped: the input text, unchanged, so the
    # rejection record holds what was actually read.
    text: str


class QualityFilters:
    def __init__(self, cfg: FilterConfig) -> None:
        self.cfg = cfg
        self.language = lang = languages.get(languages.normalise(cfg.language))
        self.gopher_repetition = (
            GopherRepetition(cfg.gopher_repetition) if cfg.gopher_repetition.enabled else None
        )
        self.gopher_quality = (
            GopherQuality(cfg.gopher_quality, lang.gopher_stop_words)
            if cfg.gopher_quality.enabled
            else None
        )
        self.c4 = C4(cfg.c4, lang.policy_phrases) if cfg.c4.enabled else None
        self.fineweb = FineWeb(cfg.fineweb) if cfg.fineweb.enabled else None
        self.integrity = (
            Integrity(cfg.integrity, lang) if cfg.integrity.enabled else None
        )

    def apply(self, text: str) -> FilterOutcome:
        view = TextView(text)
        for f in (self.gopher_repetition, self.gopher_quality):
            if f is not None:
                keep, reason = f.filter(view)
                if not keep:
                    return FilterOutcome(False, reason, text)
        if self.c4 is not None:
            res = self.c4.filter(view)
            if not res.keep:
                return FilterOutcome(False, res.reason, text)
            view = res.view
        if self.fineweb is not None:
            keep, reason = self.fineweb.filter(view)
            if not keep:
                return FilterOutcome(False, reason, text)
        if self.integrity is not None:
            keep, reason = self.integrity.filter(view)
            if not keep:
                return FilterOutcome(False, reason, text)
        return FilterOutcome(True, None, view.text)

    def rules(self) -> list[RuleSpec]:
        """One spec per reason of `reasons(cfg)`, in order; threshold None where off."""
        cfg = self.cfg
        return [
            *gopher_repetition.specs(cfg.gopher_repetition),
            *gopher_quality.specs(cfg.gopher_quality),
            *c4.specs(cfg.c4),
            *fineweb.specs(cfg.fineweb),
            *integrity.specs(cfg.integrity, self.language),
        ]

    def evaluate(self, text: str) -> tuple[FilterOutcome, dict[str, float]]:
        """`apply(text)` and every enabled filter's metrics (see the module docstring)."""
        view = TextView(text)
        metrics: dict[str, float] = {}
        reason: str | None = None
        for f in (self.gopher_repetition, self.gopher_quality):
            if f is not None:
                _, why, values = f.evaluate(view)
                metrics.update(values)
                reason = reason or why
        judged = view
        if self.c4 is not None:
            res, values = self.c4.evaluate(view)
            metrics.update(values)
            reason = reason or res.reason
            judged = res.view if res.keep else None
        if self.fineweb is not None:
            if judged is None:  # C4 dropped it: there is no text for FineWeb to judge
                metrics.update({s.reason: NAN for s in self.fineweb.specs})
            else:
                _, why, values = self.fineweb.evaluate(judged)
                metrics.update(values)
                reason = reason or why
        if self.integrity is not None:
            if judged is None:
                metrics.update({s.reason: NAN for s in self.integrity.specs})
            else:
                _, why, values = self.integrity.evaluate(judged)
                metrics.update(values)
                reason = reason or why
        if reason is not None:
            return FilterOutcome(False, reason, text), metrics
        return FilterOutcome(True, None, judged.text if judged is not None else text), metrics

    def apply_many(self, texts: list[str]) -> list[FilterOutcome]:
        apply = self.apply
        return [apply(t) for t in texts]
