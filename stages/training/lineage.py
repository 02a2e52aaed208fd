"""Lineage by version: what each model-half asset was materialized from, recorded when it
succeeds, so that later stages consume a recorded checkpoint (never "newest on disk") and
an outdated chain is seen rather than trained on, evaluated or exported.

`data/<asset>/materialized.json` is written atomically on success: the checkpoint, its
step and weights hash, the runs, the inputs, and for post-training the parent's record as
it was consumed, so one record holds the whole chain back to the raw shards and travels
with an export. The fields: docs/operations.md#lineage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from model.checkpoint.files import PREFIX, Checkpoint, all_checkpoints, checksums, verify
from stages.asset_names import CHAIN, RAW_DOCUMENTS
from stages.store.outputs import DataStore, write_json
from stages.training.runs import RUN_FILE, RunSpec

RECORD_FILE = "materialized.json"
FORMAT = 1
RAW = RAW_DOCUMENTS
# spec.lineage keys of a post-training run that are records or their digest, not inputs
_CHAIN_KEYS = ("init", "parent", "reward_model", "upstream")
_TAG_LIMIT = 5000  # MLflow's tag value limit


class LineageError(RuntimeError):
    """A checkpoint that cannot be consumed as recorded; the message names the asset, the
    path and what to materialize."""


def record_path(directory: Path) -> Path:
    return Path(directory) / RECORD_FILE


def read_record(store: DataStore, asset: str) -> dict[str, Any] | None:
    return read_record_in(store.dir(asset))


def read_record_in(directory: Path) -> dict[str, Any] | None:
    """The record in an asset directory (or an archived run's, previous/<key>/), or None."""
    path = record_path(directory)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:  # written atomically, so only a hand edit gets here
        raise LineageError(f"{path} is not valid JSON ({e}): re-materialize its asset") from e


def stage_name(asset: str) -> str:
    """base_model -> base, sft_model -> sft: the short names of the MLflow tags."""
    return asset.removesuffix("_model")


def weights_of(path: Path) -> dict[str, str]:
    """{"weights_sha256", "heads_sha256"?} from a checkpoint's checksums.json (already
    verified by whoever chose it: hashing a large checkpoint again is slow)."""
    sums = checksums(path)
    out = {"weights_sha256": sums["model.safetensors"]}
    if "heads.safetensors" in sums:
        out["heads_sha256"] = sums["heads.safetensors"]
    return out


def finished_checkpoint(spec: RunSpec) -> Checkpoint | None:
    """The run's checkpoint at its last step if it is intact, else None (not finished, or
    damaged: train again, the program resumes from its newest intact step)."""
    ckpt = Checkpoint(spec.dir / f"{PREFIX}{spec.steps:08d}", spec.steps)
    return ckpt if ckpt.path.is_dir() and verify(ckpt) is None else None


def shard_fingerprints(store: DataStore, shards: list[str]) -> dict[str, str]:
    """{shard: raw_documents fingerprint} (its files' names, sizes and times) as read now."""
    manifests = {s: store.manifest(RAW, s) or {} for s in sorted(shards)}
    return {s: m.get("stats", {}).get("extra", {}).get("fingerprint", "") for s, m in manifests.items()}


def planned_record(store: DataStore, spec: RunSpec) -> dict[str, Any]:
    """The record of `spec` before it has a checkpoint: its inputs and its chain (what its
    MLflow run is tagged with before training starts)."""
    lineage = spec.lineage
    rec: dict[str, Any] = {"format": FORMAT, "asset": spec.asset, "run_key": spec.key, "final_step": spec.steps}
    if "parent" in lineage:  # post-training: the parent's record as prepare_post consumed it
        rec["inputs"] = {k: v for k, v in lineage.items() if k not in _CHAIN_KEYS}
        rec["parent"] = lineage["parent"]
        if isinstance(lineage.get("reward_model"), dict) and "record" in lineage["reward_model"]:
            rec["reward_model"] = lineage["reward_model"]["record"]
    else:  # pretraining: the data versions, and the raw shards they came from
        shards = list(lineage.get("token_shards", {}))
        rec["inputs"] = {**lineage, "shard_fingerprints": shard_fingerprints(store, shards)}
    return rec


def record_materialized(store: DataStore, asset: str, spec: RunSpec, checkpoint: Checkpoint | Path,
                        dagster_run_id: str, mlflow_run_id: str) -> dict[str, Any]:
    """Write data/<asset>/materialized.json for `checkpoint`, which the caller verified.
    A re-materialization that trained nothing (same run, same weights) keeps the record of
    the run that trained it: its Dagster and MLflow runs are where the weights came from."""
    path = checkpoint.path if isinstance(checkpoint, Checkpoint) else Path(checkpoint)
    step = checkpoint.step if isinstance(checkpoint, Checkpoint) else int(path.name[len(PREFIX):])
    weights = weights_of(path)
    old = read_record_in(store.dir(asset))
    if old and old.get("run_key") == spec.key and old.get("step") == step \
            and all(old.get(k) == v for k, v in weights.items()):
        return old
    runs = spec.record().get("mlflow_runs", [])
    rec = {**planned_record(store, spec), "asset": asset, "checkpoint": str(path), "step": step, **weights,
           "dagster_run_id": dagster_run_id, "mlflow_run_id": mlflow_run_id or (runs[-1] if runs else ""),
           "mlflow_run_ids": runs, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json(record_path(store.dir(asset)), rec)
    store.publish(asset)
    return rec


def chain(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record, its parent, its parent's parent ... down to the pretrained model."""
    out = []
    while record:
        out.append(record)
        record = record.get("parent") or {}
    return out


def data_inputs(record: dict[str, Any]) -> dict[str, Any]:
    """What the chain was pretrained on: tokenizer hash, token shard versions, shard
    fingerprints (and continued_from, if the base run continued another)."""
    return dict(chain(record)[-1].get("inputs", {})) if record else {}


def ratings_trained_on(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chat page's ratings a chain was aligned on: the human_preferences version that
    the stage which read the most of them consumed ({"version", "ratings"}), or
    None when no stage of the chain read any. Ratings are only appended, so the first
    `ratings` of the feedback folder are in the model."""
    best, todo = None, [record] if record else []
    while todo:
        r = todo.pop()
        todo += [x for x in (r.get("parent"), r.get("reward_model")) if x]
        human = r.get("inputs", {}).get("human_preferences")
        if human and (best is None or int(human.get("ratings", 0)) > best["ratings"]):
            best = {"version": str(human.get("version", "")), "ratings": int(human.get("ratings", 0))}
    return best


def ratings_in_models(store: DataStore, assets: Sequence[str] = tuple(CHAIN)) -> int:
    """How many ratings (the first N of the feedback folder) the current records of
    `assets` (the alignment chain's) were aligned on: what the feedback sensor counts as
    used, whatever human_preferences was materialized with since."""
    found = [ratings_trained_on(read_record(store, a)) for a in assets]
    return max((f["ratings"] for f in found if f), default=0)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:_TAG_LIMIT]


def lineage_tags(store: DataStore, asset_or_record: str | dict[str, Any]) -> dict[str, str]:
    """The MLflow tags every run of the chain carries, from one record (or the asset's
    current one): the data versions the chain was pretrained on and, per stage of the
    chain (the reward model included), its weights and its Dagster and MLflow runs."""
    rec = read_record(store, asset_or_record) if isinstance(asset_or_record, str) else asset_or_record
    if not rec:
        return {}
    tags: dict[str, str] = {}
    data = data_inputs(rec)
    if "tokenizer_hash" in data:
        tags["yunque.tokenizer_version"] = data["tokenizer_hash"]
    shards = data.get("token_shards", {})
    if shards:
        tags["yunque.token_shards_versions"] = _short(dict(sorted(shards.items())))
    tags |= {f"yunque.token_shards.{s}": v for s, v in shards.items()}
    tags |= {f"yunque.shard_fingerprint.{s}": fp for s, fp in data.get("shard_fingerprints", {}).items()}
    if cont := data.get("continued_from"):  # the base run continued another (stages.training.pretrain)
        tags["yunque.continued_from"] = str(cont.get("run_key", "")) if isinstance(cont, dict) else _short(cont)
        if isinstance(cont, dict) and "step" in cont:
            tags["yunque.continued_from_step"] = str(cont["step"])
    todo = [rec]
    while todo:
        r = todo.pop()
        todo += [x for x in (r.get("parent"), r.get("reward_model")) if x]
        if "weights_sha256" in r:  # a materialized stage (a planned one has no weights yet)
            name = stage_name(r["asset"])
            tags[f"yunque.{name}.weights"] = r["weights_sha256"]
            if human := r.get("inputs", {}).get("human_preferences"):  # the ratings it was aligned on
                tags[f"yunque.{name}.feedback_version"] = str(human.get("version", ""))
            tags[f"yunque.{name}.dagster_run"] = r.get("dagster_run_id", "")
            tags[f"yunque.{name}.mlflow_run"] = r.get("mlflow_run_id", "")
    return tags


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("weights_sha256") == b.get("weights_sha256") and a.get("heads_sha256") == b.get("heads_sha256")


def outdated(store: DataStore, record: dict[str, Any]) -> dict[str, str]:
    """{asset: why} for every asset of `record`'s chain that must be re-materialized, in
    chain order (parents first); empty when every recorded parent is its asset's current
    record. A stage is outdated when a parent it consumed is no longer that parent's
    record (retrained since) or is itself outdated."""
    found: dict[str, str] = {}
    inputs = [x for x in (record.get("parent"), record.get("reward_model")) if x]
    for used in inputs:
        name = used["asset"]
        current = read_record(store, name)
        # parents first; a parent without a record now is judged by the one it had
        upstream = outdated(store, current if current is not None else used)
        found |= {k: v for k, v in upstream.items() if k not in found}
        if current is None:
            found[name] = f"{name} has no materialized record"
            why = f"trained from {name}, which has no record now"
        elif not _same_weights(used, current):
            why = (f"trained from {name} weights {used.get('weights_sha256', '?')[:12]}, but {name} is now "
                   f"{current.get('weights_sha256', '?')[:12]} (dagster run {current.get('dagster_run_id', '?')})")
        elif name in found:
            why = f"trained from {name}, which is outdated"
        else:
            continue
        found.setdefault(record["asset"], why)
    if record["asset"] in found:  # itself last: parents are re-materialized first
        found[record["asset"]] = found.pop(record["asset"])
    return found


def unfinished_note(store: DataStore, asset: str) -> str:
    """Why an asset directory without a record has none: a run that never finished."""
    return unfinished_note_in(store.dir(asset), asset)


def unfinished_note_in(directory: Path, asset: str) -> str:
    ckpts = all_checkpoints(directory)
    if not ckpts:
        return f"no materialized {asset} under {directory}: materialize {asset} first"
    run = json.loads((directory / RUN_FILE).read_text()) if (directory / RUN_FILE).exists() else {}
    steps = run.get("config", {}).get("train", {}).get("steps", "?")
    return (f"{directory} holds checkpoints up to step {ckpts[-1].step} of {steps} but no {RECORD_FILE}: its run "
            f"(key {run.get('key', '?')}) was never materialized to its end (unfinished, interrupted, or trained "
            f"before runs were recorded); materialize {asset} first (it resumes, or only records a finished run)")
