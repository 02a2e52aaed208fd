"""`yunque lineage PATH [--json]`: where a model came from, back to the raw shards.

PATH is a checkpoint (data/<asset>/step-NNNNNNNN), an asset directory (data/<asset>) or an
export directory (data/exported_model, or a copy of it: the export carries its lineage).
Each stage of the chain is printed with its checkpoint, step, weights hash, Dagster run
and MLflow run, then the tokenizer, the token shard versions and the raw shards'
fingerprints the chain was pretrained on. Read from the records that stages.training.lineage
writes; nothing is recomputed except, inside a home, whether the chain is still current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# model.export.hf.RECORD_FILE: importing that module loads torch, which this command never needs
EXPORT_FILE = "yunque_export.json"
ENTRY = ("asset", "checkpoint", "step", "weights_sha256", "heads_sha256", "run_key", "dagster_run_id",
         "mlflow_run_id")


def _entry(rec: dict[str, Any]) -> dict[str, Any]:
    out = {k: rec[k] for k in ENTRY if k in rec}
    human = rec.get("inputs", {}).get("human_preferences")
    if human:  # the chat page's ratings it was aligned on (stages.data.human_preferences)
        out["feedback"] = {k: human.get(k) for k in ("version", "ratings", "examples", "weight")}
    if rec.get("reward_model"):
        out["reward_model"] = _entry(rec["reward_model"])
    return out


def _unrecorded(path: Path, rec: dict | None, step: int) -> tuple[dict[str, Any], str]:
    """A pseudo-record for a checkpoint no record names, and why it is not the recorded one."""
    from stages.training.lineage import weights_of
    from stages.training.runs import RUN_FILE

    own = {"checkpoint": str(path), "step": step, **weights_of(path), "dagster_run_id": "", "mlflow_run_id": ""}
    run_file = path.parent / RUN_FILE
    run = json.loads(run_file.read_text()) if run_file.exists() else {}
    if rec is not None and run.get("key") == rec.get("run_key"):  # an earlier step of the recorded run
        why = (f"NOT the recorded checkpoint: step {step} of the recorded run, whose record names step {rec['step']} "
               f"({rec['checkpoint']})")
        return {**rec, **own}, why
    state = json.loads((path / "state.json").read_text())
    lineage = state.get("lineage") or run.get("lineage", {})  # post-training checkpoints carry theirs
    pseudo = {"asset": rec["asset"] if rec else _asset_of(path.parent), "run_key": run.get("key", ""), **own}
    if "parent" in lineage:
        pseudo["parent"] = lineage["parent"]
        if isinstance(lineage.get("reward_model"), dict) and "record" in lineage["reward_model"]:
            pseudo["reward_model"] = lineage["reward_model"]["record"]
    else:
        pseudo["inputs"] = lineage
    why = "no record names it" if rec is None else f"the record names another run's step {rec['step']}"
    return pseudo, f"NOT a materialized checkpoint ({why}: a run that did not finish, or one replaced since)"


def _asset_of(directory: Path) -> str:
    # data/<asset>/previous/<key>/ holds an archived run of <asset>
    return directory.parent.parent.name if directory.parent.name == "previous" else directory.name


def _store_for(directory: Path, asset: str):
    """The home's store when `directory` is that home's data/<asset>, else None (a copy)."""
    from stages.store.outputs import DataStore

    if directory.parent.name != "data" or directory.name != asset:
        return None
    return DataStore(directory.parent.parent)


def describe(path: str | Path) -> dict[str, Any]:
    """The lineage of `path` as one JSON-able dict (see the module docstring)."""
    from model.checkpoint.files import PREFIX, SUMS
    from stages.training.lineage import (
        RECORD_FILE,
        LineageError,
        chain,
        data_inputs,
        outdated,
        read_record_in,
        weights_of,
    )

    path = Path(path).absolute()
    if not path.exists():
        raise LineageError(f"{path} does not exist")
    kind, recorded, store = "asset", True, None
    if (path / EXPORT_FILE).exists():
        kind = "export"
        export = json.loads((path / EXPORT_FILE).read_text())
        rec = export.get("lineage")
        if not rec:
            raise LineageError(f"{path / EXPORT_FILE} carries no lineage (written before exports recorded it, or "
                               "exported from a checkpoint without a record): re-materialize exported_model")
        src = export.get("source", {})
        note = f"export of {src.get('asset', '?')} step {src.get('step', '?')} ({src.get('checkpoint', '?')})"
        store = _store_for(path, "exported_model")
    elif path.name.startswith(PREFIX) and (path / SUMS).exists():
        kind, step = "checkpoint", int(path.name[len(PREFIX):])
        rec = read_record_in(path.parent)
        if rec and Path(rec["checkpoint"]).name == path.name and \
                weights_of(path)["weights_sha256"] == rec["weights_sha256"]:
            note = f"the recorded checkpoint of {rec['asset']}"
            store = _store_for(path.parent, rec["asset"])
        else:
            recorded = False
            rec, note = _unrecorded(path, rec, step)
    else:
        rec = read_record_in(path)
        if rec is None:
            raise LineageError(f"no {RECORD_FILE} in {path}: not an asset directory, a checkpoint or an export, or "
                               f"an asset never materialized (materialize {path.name} first)")
        note = f"the recorded checkpoint of {rec['asset']}"
        store = _store_for(path, rec["asset"])
    if kind != "export" and "previous" in path.parts[-3:]:
        note += " (an archived run, replaced since: under previous/<key>/)"
    return {"path": str(path), "kind": kind, "recorded": recorded, "note": note,
            "chain": [_entry(r) for r in chain(rec)], "data": data_inputs(rec),
            # only inside a home can the chain be compared with the current records
            "outdated": outdated(store, rec) if store is not None else None}


def export_lineage(checkpoint: Path) -> dict[str, Any] | None:
    """What `yunque export` records of a checkpoint's lineage: {"source", "lineage"} when
    a record names this checkpoint, else None (an export of an unrecorded checkpoint)."""
    from stages.training.lineage import read_record_in, weights_of

    rec = read_record_in(checkpoint.parent)
    if not rec or Path(rec["checkpoint"]).name != checkpoint.name or \
            weights_of(checkpoint)["weights_sha256"] != rec["weights_sha256"]:
        return None
    return {"source": {"asset": rec["asset"], "checkpoint": str(checkpoint), "step": rec["step"],
                       "weights_sha256": rec["weights_sha256"]}, "lineage": rec}


def _stage_lines(e: dict[str, Any], indent: str = "") -> list[str]:
    lines = [f"{indent}{e.get('asset', '?')}  step {e.get('step', '?')}  {e.get('checkpoint', '?')}"]
    fields = [("weights sha256", "weights_sha256"), ("heads sha256", "heads_sha256"), ("run key", "run_key"),
              ("dagster run", "dagster_run_id"), ("mlflow run", "mlflow_run_id")]
    lines += [f"{indent}    {label:<15} {e.get(k) or '-'}" for label, k in fields if k in e]
    if f := e.get("feedback"):
        lines.append(f"{indent}    {'feedback':<15} version {f['version']} ({f['ratings']} ratings: {f['examples']} "
                     f"examples, weight {f['weight']})")
    if "reward_model" in e:
        lines += [f"{indent}    scored by:"] + _stage_lines(e["reward_model"], indent + "      ")
    return lines


def render(view: dict[str, Any]) -> str:
    lines = [f"{view['path']}: {view['note']}", ""]
    for e in view["chain"]:
        lines += _stage_lines(e)
    data = view["data"]
    lines += ["", f"tokenizer  {data.get('tokenizer_hash', '-')}"]
    if data.get("continued_from"):
        c = data["continued_from"]
        lines.append(f"continued from  run {c.get('run_key', '?')} step {c.get('step', '?')} "
                     f"(weights {str(c.get('weights_sha256', '?'))[:16]})")
    shards, fps = data.get("token_shards", {}), data.get("shard_fingerprints", {})
    width = max([len(s) for s in shards] + [5])
    lines.append(f"{'shard':<{width}}  {'token_shards version':<22}  raw fingerprint")
    lines += [f"{s:<{width}}  {v:<22}  {fps.get(s) or '-'}" for s, v in sorted(shards.items())]
    stale = view["outdated"]
    if stale is None:
        lines += ["", "current: unknown (not inside a home's data directory)"]
    elif stale:
        lines += ["", f"OUTDATED: re-materialize {', '.join(stale)}"] + [f"  {a}: {w}" for a, w in stale.items()]
    else:
        lines += ["", "current: every stage was trained from its parent's current record"]
    return "\n".join(lines)


def cmd_lineage(args: argparse.Namespace) -> int:
    from stages.training.lineage import LineageError

    try:
        view = describe(args.path)
    except (LineageError, OSError, ValueError, KeyError) as e:
        print(f"yunque lineage: {e}", file=sys.stderr)
        return 2
    print(json.dumps(view, indent=1, ensure_ascii=False) if args.json else render(view))
    return 0


def add_command(sub) -> None:
    p = sub.add_parser("lineage", help="the chain a checkpoint, asset or export came from, back to the raw shards")
    p.add_argument("path", help="data/<asset>/step-NNNNNNNN, data/<asset> or data/exported_model (or a copy)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_lineage)
