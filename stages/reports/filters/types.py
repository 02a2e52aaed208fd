"""The filter report's data, shared by the module that builds it (`report`) and the one
that draws its histograms (`histograms`): a row per rule and the report of one shard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RuleRow:
    reason: str
    metric: str
    drop_if: str
    threshold: float | None
    measured: int  # documents with a finite value
    fails: int  # documents that fail the rule, wherever it stands in the order
    dropped: int  # documents whose first failing rule is this one
    p5: float | None = None
    median: float | None = None
    p95: float | None = None

    def row(self) -> dict[str, Any]:
        return {"reason": self.reason, "metric": self.metric,
                "threshold": "off" if self.threshold is None else f"{self.drop_if} {self.threshold:g}",
                "dropped": self.dropped, "fails": self.fails, "passes": self.measured - self.fails,
                "measured": self.measured, "p5": _num(self.p5), "median": _num(self.median), "p95": _num(self.p95)}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


@dataclass
class FilterReport:
    shard: str
    docs_in: int
    kept: int
    rules: list[RuleRow]
    values: dict[str, np.ndarray]  # finite values per rule reason, for the histograms
    langid: dict[str, Any]  # drops per language-ID reason, documents per language
    profile: dict[str, Any]
    drops: dict[str, int]  # documents per first failing reason, language ID included
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def accounted(self) -> int:
        """kept + every drop: equals docs_in when no document is counted twice or lost."""
        return self.kept + sum(self.drops.values())
