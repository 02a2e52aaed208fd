"""A training run on disk: its spec (`RunSpec`), `run.json` and `train_config.json`, how it
ended (`ended`, with early stopping), and the archive of a run whose key changed. Shared
by pretraining, post-training and the lineage records."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.checkpoint.files import PREFIX, Checkpoint, verify
from model.pretrain.early_stop import EarlyStop, read_best, stop_holds
from stages.store.outputs import write_json

RUN_FILE = "run.json"
CONFIG_FILE = "train_config.json"


class PretrainError(RuntimeError):
    """A training run that cannot be prepared or read back (post-training's errors derive
    from it); the message says what to materialize or delete."""


@dataclass
class RunSpec:
    asset: str
    dir: Path
    key: str
    config: dict[str, Any]  # {"train": ..., "model": ...} as the training program reads it
    # tokenizer hash, token shard data versions; for base_model also start, continued_from,
    # new_shards, old_shards, replay_fraction, sources, steps (see prepare)
    lineage: dict[str, Any]

    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG_FILE

    @property
    def steps(self) -> int:
        return self.config["train"]["steps"]

    @property
    def start_step(self) -> int:
        return self.config["train"].get("start_step", 0)

    @property
    def continued_from(self) -> dict[str, Any] | None:
        return self.lineage.get("continued_from")

    def record(self) -> dict[str, Any]:
        path = self.dir / RUN_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def add_mlflow_run(self, run_id: str) -> None:
        rec = self.record()
        rec.setdefault("mlflow_runs", []).append(run_id)
        write_json(self.dir / RUN_FILE, rec)


@dataclass
class RunEnd:
    """A run that has ended: `recorded` is its best checkpoint (what the stages record and
    consume; the last one when no evaluation named a best), `last` the one it ended on."""
    recorded: Checkpoint
    last: Checkpoint
    best: dict[str, Any] | None  # best.json (model.pretrain.early_stop), if the run wrote one
    early_stop: str | None = None  # why it ended before its last step, if it did

    @property
    def stopped_at(self) -> int | None:
        return self.last.step if self.early_stop else None


def _intact(root: Path, step: int) -> Checkpoint | None:
    found = Checkpoint(root / f"{PREFIX}{step:08d}", step)
    return found if found.path.is_dir() and verify(found) is None else None


def ended(root: Path, steps: int, patience: int | None) -> RunEnd | None:
    """The run under `root` if it ended at `steps`, or early stopping ended it (under
    `patience`; None: as it was run), with both checkpoints intact; else None (train on: the
    program resumes from its newest intact checkpoint)."""
    best, early = read_best(root), None
    last = _intact(root, steps)
    if last is None:
        holds = best is not None and best.get("stopped_at") is not None if patience is None \
            else stop_holds(best, patience)
        if not holds or (last := _intact(root, best["stopped_at"])) is None:
            return None
        early = EarlyStop.from_record(best).summary(steps)
    recorded = last
    if best and best.get("last_step") == last.step and best.get("step") not in (None, last.step):
        recorded = _intact(root, best["step"])
        if recorded is None:  # rotation never deletes it: only a damaged or hand-edited run gets here
            raise PretrainError(f"{root}: the best checkpoint (step {best['step']}, {root / 'best.json'}) is missing "
                                f"or damaged; delete {root} to train again")
    return RunEnd(recorded, last, best, early)


def run_end(spec: RunSpec) -> RunEnd | None:
    """How `spec`'s run ended (see `ended`), under its configured patience."""
    return ended(spec.dir, spec.steps, spec.config["train"].get("early_stop_patience", 0))


def archive_if_changed(root: Path, key: str) -> Path | None:
    """Move the run on disk to previous/<its key>/ unless it is run `key`; where it went."""
    run = root / RUN_FILE
    if not run.exists():
        return None
    old = json.loads(run.read_text()).get("key")
    if old == key:
        return None
    dest, n = root / "previous" / str(old), 1
    while dest.exists():  # that run came back and changed again: never mix two runs' files
        dest, n = root / "previous" / f"{old}-{n}", n + 1
    dest.mkdir(parents=True)
    for p in root.iterdir():
        if p.name != "previous":
            shutil.move(str(p), dest / p.name)
    return dest
