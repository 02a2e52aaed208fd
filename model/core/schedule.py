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


def schedule_problem(section: str, *, lr: float, min_lr: float, warmup: int, steps: int) -> str | None:
    """Why a learning-rate schedule of `lr_at` cannot work as configured (`section`:
    "train", "post.sft", ... names the keys), or None: a floor above the peak, or a warmup
    the run never finishes."""
    if min_lr > lr:
        return (f"{section}.min_lr ({min_lr:g}) exceeds {section}.lr ({lr:g}): the learning rate would rise while "
                "it decays; set min_lr to at most lr (a tenth of it is usual)")
    if steps and warmup >= steps:  # 0 steps: the stage is skipped (a post-training stage copies its start)
        return (f"{section}.warmup ({warmup}) is not shorter than {section}.steps ({steps}): the run would end "
                f"before the learning rate reached {section}.lr; lower warmup (or raise steps)")
    return None
