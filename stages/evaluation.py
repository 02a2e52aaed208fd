"""eval_report and exported_model as stages (no Dagster): which checkpoints exist, one
evaluation row per checkpoint (cached by the checkpoint's weights, the evaluation
config and the data it reads, so an unchanged model is not re-evaluated), the report
files, the export.

    data/eval_report/report.{md,json}, loss_curves.png, math_accuracy.png
                     rows/<stage>-<key>.json     one checkpoint's evaluated row
    data/exported_model/                          Hugging Face directory (+ GGUF files)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from pipelines.tokens.tokenizer import file_hash
from stages import eval_report
from stages.config import YunqueConfig
from stages.pretrain import read_metrics
from stages.selection import consumed_checkpoint
from stages.store import DataStore, cache_key, write_json

EVAL_REPORT = "eval_report"
EXPORTED_MODEL = "exported_model"
EVAL_CODE_VERSION = "1"
EXPORT_CODE_VERSION = "1"


def checkpoints(store: DataStore) -> dict:
    """{stage: the checkpoint it is evaluated on (stages.selection, verified once here)}
    for the chain's stages that have one."""
    found = {}
    for stage in eval_report.STAGES:
        if (chosen := consumed_checkpoint(store, stage)) is not None:
            found[stage] = chosen
    return found


def _weights_hash(path: Path) -> str:
    return json.loads((path / "checksums.json").read_text())["model.safetensors"]


def _file_hash(path: str | Path) -> str:
    return file_hash(Path(path)) if Path(path).is_file() else "missing"


def _row_key(found, cfg: YunqueConfig) -> str:
    """What an evaluated row depends on: the weights, the evaluation settings, the token
    shards its validation windows come from, and the content of a GSM8K file."""
    shards = found.state().get("train_config", {}).get("shards", [])
    inputs = {s: _file_hash(Path(s) / "header.json") for s in shards}
    math_file = _file_hash(cfg.eval.math_file) if cfg.eval.math_file else ""
    return cache_key(EVAL_CODE_VERSION, _weights_hash(found.path), dataclasses.asdict(cfg.eval), inputs, math_file)


def _read_row(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # missing, or cut short by a crash: evaluate again
        return None


def _mlflow_run(store: DataStore, stage: str) -> str:
    run = store.dir(stage) / "run.json"
    runs = json.loads(run.read_text()).get("mlflow_runs", []) if run.exists() else []
    return runs[-1] if runs else ""


def evaluate_all(store: DataStore, cfg: YunqueConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Evaluate every checkpoint (or reuse its cached row) and write the report."""
    from model.evaluate import evaluate_checkpoint

    found = checkpoints(store)
    if not found:
        raise FileNotFoundError(f"no checkpoints under {store.data}/{{{','.join(eval_report.STAGES)}}}: "
                                "materialize base_model first")
    out = store.dir(EVAL_REPORT)
    (out / "rows").mkdir(parents=True, exist_ok=True)
    rows, reused = {}, []
    for stage, ckpt in found.items():
        key = _row_key(ckpt, cfg)
        cached = out / "rows" / f"{stage}-{key}.json"
        row = _read_row(cached)
        if row is not None:
            reused.append(stage)
        else:
            if progress:
                progress(f"evaluating {stage} ({ckpt.path})")
            row = evaluate_checkpoint(ckpt, cfg.eval, progress=progress) | {"eval_key": key}
            write_json(cached, row)
        rows[stage] = row | {"mlflow_run_id": _mlflow_run(store, stage)}
    records = {stage: read_metrics(store.dir(stage)) for stage in found}
    report = eval_report.build(rows, records, cfg.eval.overfit_window, cfg.eval.repetition_threshold)
    paths = eval_report.write(report, records, out)
    return {"report": report, "paths": paths, "reused": reused,
            "checkpoints": {s: str(c.path) for s, c in found.items()}}


def export_latest(store: DataStore, cfg: YunqueConfig) -> dict:
    """Export the last stage of the chain that has a checkpoint and load the export back in
    transformers (model.export_check). Memoised on the weights and the export settings:
    an unchanged checkpoint is neither re-exported nor re-checked."""
    from model.export_check import check_export
    from model.export_hf import RECORD_FILE, export_hf
    from model.load import load

    found = checkpoints(store)
    if not found:
        raise FileNotFoundError("no checkpoint to export: materialize base_model first")
    stage, found_ckpt = list(found.items())[-1]
    path = found_ckpt.path
    out = store.dir(EXPORTED_MODEL)
    key = cache_key(EXPORT_CODE_VERSION, _weights_hash(path), dataclasses.asdict(cfg.export), list(cfg.eval.prompts))
    record = _read_row(out / RECORD_FILE)
    if record and record.get("export_key") == key and all((out / f).exists() for f in record["files"]):
        return {**record, "cached": True}
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    loaded = load(found_ckpt)
    record = export_hf(loaded, tmp, cfg.export.dtype, cfg.export.gguf)
    ggufs = [f for f in record["files"] if f.endswith(".gguf")]
    record |= {"stage": stage, "dir": str(out), "weights_hash": _weights_hash(path), "export_key": key,
               "checks": check_export(loaded, tmp, cfg.eval.prompts, ggufs, cfg.export.dtype)}
    (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2))
    shutil.rmtree(out, ignore_errors=True)  # no stale files from an earlier export (a GGUF now off)
    tmp.rename(out)
    return {**record, "cached": False}
