"""Learning-rate schedules as pure functions of the step (nothing to checkpoint)."""

from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, min_lr: float, warmup: int, total: int, kind: str = "cosine",
          decay_fraction: float = 0.2) -> float:
    """Linear warmup to `lr`, then cosine decay to `min_lr` at `total` ("cosine"), or hold
    `lr` and decay linearly over the last `decay_fraction` of the run ("wsd",
    warmup-stable-decay)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if kind == "cosine":
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))
    if kind == "wsd":
        decay_start = int(total * (1 - decay_fraction))
        if step < decay_start:
            return lr
        progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
        return lr + (min_lr - lr) * progress
    raise ValueError(f"unknown schedule {kind!r}; choose cosine or wsd")
