"""The two questions every joining stage asks, each with one answer:

* which shards does a stage consume? (`consumed_shards`)
* which checkpoint does a stage start from, evaluate or export? (`consumed_checkpoint`)

Assets call these (through `assets.partitions.consumed_shards` for the Dagster side of
the first); nothing else decides either question. A checkpoint is consumed by version:
the one its asset's materialized.json names (stages.training.lineage), never the newest on disk,
which may be an unfinished run's. For a pretraining run that is its best checkpoint
(stages.training.runs.run_end), which may precede the run's last step: the run's best.json
(model.pretrain.early_stop) says that run ended and that step was its best.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.checkpoint.files import Checkpoint, verify
from model.pretrain.early_stop import read_best
from stages.store.outputs import DataStore
from stages.training.lineage import LineageError, read_record_in, unfinished_note_in, weights_of


@dataclass
class ShardSelection:
    ready: list[str]  # consumed: registered, still in the corpus, upstream output committed
    pending: list[str] = field(default_factory=list)  # registered and present, upstream not yet materialized
    gone: list[str] = field(default_factory=list)  # registered but no longer in the corpus


def consumed_shards(store: DataStore, upstream: str, registered: Iterable[str],
                    present: Iterable[str]) -> ShardSelection:
    """The shards a whole-corpus stage reads from the per-shard asset `upstream`: those
    registered as partitions that are still in the corpus (a vanished shard's documents
    must not keep, drop or train anyone) and whose `upstream` output is committed."""
    present = set(present)
    registered = list(dict.fromkeys(registered))
    live = [s for s in registered if s in present]
    ready = [s for s in live if store.manifest(upstream, s) is not None]
    return ShardSelection(ready=ready, pending=[s for s in live if s not in ready],
                          gone=sorted(set(registered) - present))


def consumed_record(store: DataStore, asset: str) -> tuple[dict[str, Any], Checkpoint]:
    """(the record, its checkpoint, verified) of training asset `asset`; raises
    LineageError, naming the asset, the path and what to materialize, when there is no
    record (never materialized, or its run restarted and unfinished), when the record is
    not at its run's last step, or when the checkpoint is missing, damaged or replaced."""
    return recorded_checkpoint(store.dir(asset), asset)


def recorded_checkpoint(directory: Path, asset: str) -> tuple[dict[str, Any], Checkpoint]:
    """consumed_record for a training asset's directory as a path (a user's `--checkpoint`)."""
    rec = read_record_in(directory)
    if rec is None:
        raise LineageError(unfinished_note_in(directory, asset))
    # resolved in this directory, not by the absolute path recorded: a home can be moved
    path = directory / Path(rec["checkpoint"]).name
    redo = f"re-materialize {asset}"
    if rec["step"] < rec.get("final_step", rec["step"]) and not _best_of_ended_run(directory, rec):
        raise LineageError(f"{asset}: the recorded checkpoint {path} is step {rec['step']} of a "
                           f"{rec['final_step']}-step run (unfinished): materialize {asset} to finish it")
    if not path.is_dir():
        raise LineageError(f"{asset}: the recorded checkpoint {path} is missing: {redo}")
    found = Checkpoint(path, rec["step"])
    if (problem := verify(found)) is not None:
        raise LineageError(f"{asset}: the recorded checkpoint {path} is damaged ({problem}): {redo}")
    if weights_of(path).get("weights_sha256") != rec.get("weights_sha256"):
        raise LineageError(f"{asset}: {path} holds other weights than the record names (overwritten since): {redo}")
    return rec, found


def _best_of_ended_run(directory: Path, rec: dict[str, Any]) -> bool:
    """Whether the record names the best checkpoint of a run that has ended (at its last
    step, or stopped early), as the run's best.json says."""
    best = read_best(directory)
    return bool(best) and best.get("step") == rec["step"] and (
        best.get("stopped_at") is not None or best.get("last_step") == rec["final_step"])


def consumed_checkpoint(store: DataStore, asset: str) -> Checkpoint:
    """The checkpoint of training asset `asset` that later stages start from, evaluate or
    export: the one its materialized record names, verified (see consumed_record)."""
    return consumed_record(store, asset)[1]

