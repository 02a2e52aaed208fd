"""Divergence: a loss spike or a non-finite step, told apart from ordinary noise.

A step is bad at once when its loss or its gradient norm is not finite. A loss spike is
a loss above `factor` x the median of the last `window` good losses for `patience`
steps in a row: a median, not a mean, so that one outlier neither hides the next nor
raises the bar for it, and a streak, so that a single noisy batch is not a divergence.
The steps of a streak shorter than `patience` are trained on, as any other.

What is done about a bad step (`train.on_nonfinite`) is the training loop's: warn and
go on, skip the update, stop, or roll back to the last checkpoint before the spike
started and go on past the batches that caused it (model.pretrain.train).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass


@dataclass
class Verdict:
    problem: str  # what was seen, for the record
    first_step: int  # the step the trouble started at (the spike's first step)
    nonfinite: bool


class Detector:
    def __init__(self, factor: float, window: int, patience: int):
        self.factor, self.window, self.patience = factor, window, patience
        self.recent: deque[float] = deque(maxlen=window)
        self.streak: list[int] = []  # steps of the current run of high losses

    def check(self, step: int, loss: float, grad_norm: float) -> Verdict | None:
        """The verdict on `step`; a good loss joins the window."""
        if not math.isfinite(loss) or not math.isfinite(grad_norm):
            what = "loss" if not math.isfinite(loss) else "gradient norm"
            return Verdict(f"non-finite {what} (loss {loss}, gradient norm {grad_norm})", step, True)
        median = statistics.median(self.recent) if len(self.recent) >= min(self.window, 5) else None
        if self.factor > 0 and median is not None and loss > self.factor * median:
            self.streak.append(step)
            if len(self.streak) >= self.patience:
                first = self.streak[0]
                return Verdict(f"loss spike ({loss:.3f} > {self.factor} x median {median:.3f} of the last "
                               f"{len(self.recent)} losses, {len(self.streak)} steps in a row from step {first})",
                               first, False)
            return None
        self.streak = []
        self.recent.append(loss)
        return None

    def reset_streak(self) -> None:
        self.streak = []

    def state_dict(self) -> dict:
        return {"recent": list(self.recent), "streak": list(self.streak)}

    def load_state_dict(self, state: dict | None) -> None:
        self.recent = deque((state or {}).get("recent", []), maxlen=self.window)
        self.streak = list((state or {}).get("streak", []))
