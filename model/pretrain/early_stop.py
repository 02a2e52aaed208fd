"""Early stopping on validation loss, and the run's best checkpoint (torch-free: the
stages read `best.json` with `read_best`).

After each evaluation `update` makes the step the best when the validation loss fell by
more than `min_delta` nats (the trainer then keeps a checkpoint there), and otherwise counts
up to `patience` (> 0) evaluations before the run stops. The state rides in every
checkpoint, so a resumed run stops where an uninterrupted one does; rank 0 keeps
`<out>/best.json` up to date. Its fields:
docs/pretraining.md#early-stopping-and-the-best-checkpoint.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from model.checkpoint.files import BEST_FILE, PREFIX


@dataclass
class EarlyStop:
    patience: int = 0  # evaluations without improvement that stop the run (0: never)
    min_delta: float = 0.0  # nats a validation loss must fall below the best to count
    best_val: float | None = None
    best_step: int | None = None
    evals_since_best: int = 0
    stopped_at: int | None = None

    def update(self, step: int, val_loss: float | None) -> bool:
        """One evaluation; True when it is the new best (its checkpoint must exist)."""
        if val_loss is None:  # no validation tokens: nothing to judge
            return False
        if math.isfinite(val_loss) and (self.best_val is None or val_loss < self.best_val - self.min_delta):
            self.best_val, self.best_step, self.evals_since_best = float(val_loss), step, 0
            return True
        self.evals_since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.best_step is not None and self.evals_since_best >= self.patience

    def protected(self) -> set[int]:
        """Checkpoint steps rotation must keep."""
        return {self.best_step} if self.best_step is not None else set()

    def state_dict(self) -> dict:
        return {"best_val": self.best_val, "best_step": self.best_step, "evals_since_best": self.evals_since_best,
                "stopped_at": self.stopped_at, "patience": self.patience, "min_delta": self.min_delta}

    def load_state_dict(self, state: dict | None) -> None:
        """The progress of a checkpoint; patience and min_delta stay this run's (a resumed
        run with a larger patience trains on past an earlier stop)."""
        state = state or {}
        self.best_val, self.best_step = state.get("best_val"), state.get("best_step")
        self.evals_since_best = int(state.get("evals_since_best", 0))
        self.stopped_at = None

    @classmethod
    def from_record(cls, rec: dict) -> EarlyStop:
        """From best.json (read_best)."""
        return cls(rec.get("patience", 0), rec.get("min_delta", 0.0), rec.get("val_loss"), rec.get("step"),
                   rec.get("evals_since_best", 0), rec.get("stopped_at"))

    def summary(self, steps: int) -> str:
        return (f"stopped at step {self.stopped_at} of {steps}: validation loss did not improve by more than "
                f"{self.min_delta} for {self.evals_since_best} evaluations; best step {self.best_step} "
                f"(val loss {self.best_val:.4f})")

    def metadata(self, out: Path, last: Path, steps: int) -> dict:
        """The materialization's: `checkpoint` the best one (what the stages consume),
        `last_checkpoint` the last, and `early_stop` when it ended the run."""
        best = best_path(out, self.best_step) if self.best_step is not None else last
        md = {"checkpoint": {"raw_value": str(best), "type": "path"},
              "last_checkpoint": {"raw_value": str(last), "type": "path"}}
        if self.best_step is not None:
            md |= {"best_step": self.best_step, "best_val_loss": self.best_val}
        if self.stopped_at is not None:
            md["early_stop"] = self.summary(steps)
        return md

    def write(self, out: Path, last_step: int) -> None:
        """<out>/best.json, atomically (a crash leaves the old file or the new one)."""
        if self.best_step is None:
            return
        rec = {"step": self.best_step, "val_loss": self.best_val, "path": str(best_path(out, self.best_step)),
               "evals_since_best": self.evals_since_best, "patience": self.patience, "min_delta": self.min_delta,
               "last_step": last_step, "stopped_at": self.stopped_at}
        tmp = out / f".{BEST_FILE}.tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out / BEST_FILE)


def best_path(out: Path, step: int) -> Path:
    return Path(out) / f"{PREFIX}{step:08d}"


def read_best(out: str | Path) -> dict | None:
    path = Path(out) / BEST_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def stop_holds(best: dict | None, patience: int) -> bool:
    """Whether an early stop recorded in `best` (read_best) still ends the run under a
    configured `patience`: a larger patience, or 0, trains on from the stop checkpoint."""
    return bool(best and best.get("stopped_at") is not None and 0 < patience <= best.get("evals_since_best", 0))
