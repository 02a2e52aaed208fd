"""What every rule of every filter shares: its description (`RuleSpec`) and how a metric is
compared with a threshold.

A filter decides with `fails(spec, value)` on the fast path (`filter`, first failure wins)
and on the measuring path (`evaluate`, every metric), so the two cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

DropIf = Literal["below", "above", "flag"]
NAN = float("nan")


@dataclass(frozen=True)
class RuleSpec:
    reason: str  # "gopher_quality:alpha_words_ratio": one per reason in reasons(cfg)
    metric: str  # what is measured, in words, for the UI
    drop_if: DropIf  # flag: metric is 0/1, dropped when 1
    threshold: float | None  # None: the rule is off


def fails(drop_if: DropIf, threshold: float | None, value: float) -> bool:
    """Whether `value` drops the document. NaN (nothing to measure) drops nothing, as a NaN
    comparison fails in datatrove."""
    if threshold is None or math.isnan(value):
        return False
    if drop_if == "below":
        return value < threshold
    if drop_if == "above":
        return value > threshold
    return value >= threshold  # flag: threshold 1.0 when the rule is on


def ratio(num: float, den: float) -> float:
    return num / den if den else NAN
