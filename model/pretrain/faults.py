"""Fault injection for tests: corrupted batches, known by their ordinal.

    YUNQUE_FAULT_BAD_BATCHES="12,13,14"   the 12th, 13th and 14th batch the loader gives
                                          the run (counted across resumes and rollbacks:
                                          the count is in every checkpoint)
    YUNQUE_FAULT_LOSS_SCALE=100           their loss, and so their gradients, times this

what a batch of corrupted data, or a fault of the hardware it ran on, does to a step. A
test drives divergence detection and rollback with it on a real run; unset (always,
outside tests) nothing happens and the loss is the model's own.
"""

from __future__ import annotations

import os

import torch

BAD_BATCHES = "YUNQUE_FAULT_BAD_BATCHES"
LOSS_SCALE = "YUNQUE_FAULT_LOSS_SCALE"


def bad_batches() -> frozenset[int]:
    return frozenset(int(b) for b in os.environ.get(BAD_BATCHES, "").replace(" ", "").split(",") if b)


def corrupt(loss: torch.Tensor, ordinal: int, bad: frozenset[int]) -> torch.Tensor:
    if ordinal not in bad:
        return loss
    return loss * float(os.environ.get(LOSS_SCALE, "100"))
