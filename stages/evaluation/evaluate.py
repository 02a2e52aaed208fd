"""eval_report and exported_model as stages (no Dagster): which checkpoints are recorded,
one evaluation row per checkpoint (cached by the checkpoint's weights, the evaluation
config and the data it reads, so an unchanged model is not re-evaluated), the report
files, the export. A stage whose chain is outdated (a parent retrained since it was
trained, stages.training.lineage.outdated) is marked so in the report and refused by the export.

    data/eval_report/report.{md,json}, loss_curves.png, math_accuracy.png
                     rows/<stage>-<key>.json     one checkpoint's evaluated row
    data/exported_model/                          Hugging Face directory (+ GGUF files)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from model.checkpoint.files import Checkpoint, weights_sha256
from pipelines.tasks import packs
from pipelines.tokens.tokenizer import file_hash
from stages.asset_names import EVAL_REPORT, EXPORTED_MODEL
from stages.config import YunqueConfig
from stages.data.decontamination import eval_pairs
from stages.data.domain_qa import pairs_key
from stages.evaluation import harness, seed_spread
from stages.evaluation import report as eval_report
from stages.reports.loss_curve import read_metrics
from stages.store.keys import cache_key
from stages.store.outputs import DataStore, write_json
from stages.training.lineage import LineageError, outdated, read_record, unfinished_note
from stages.training.selection import consumed_record

EVAL_CODE_VERSION = "4"  # 2: the domain question-answering score; 3: math in held-out wordings; 4: seed
EXPORT_CODE_VERSION = "2"  # 2: the record carries its source's lineage


def checkpoints(store: DataStore, skipped: dict[str, str] | None = None) -> dict[str, tuple[dict, Checkpoint]]:
    """{stage: (its record, the checkpoint it names, verified once here)} for the chain's
    stages that have been materialized; a recorded checkpoint that is damaged, missing or
    unfinished raises (stages.training.selection.consumed_record). Stages with checkpoints but no
    record (a run that never finished) go into `skipped` with the reason."""
    found = {}
    for stage in eval_report.STAGES:
        if read_record(store, stage) is None:
            if skipped is not None and store.dir(stage).exists():
                skipped[stage] = unfinished_note(store, stage)
            continue
        found[stage] = consumed_record(store, stage)
    return found


def _file_hash(path: str | Path) -> str:
    return file_hash(Path(path)) if Path(path).is_file() else "missing"


def _row_key(found, cfg: YunqueConfig, qa_key: str = "", harness_key: str = "") -> str:
    """What an evaluated row depends on: the weights, the evaluation settings, the token
    shards its validation windows come from, the content of a GSM8K file and the held-out
    domain question-answer pairs."""
    shards = found.state().get("train_config", {}).get("shards", [])
    inputs = {s: _file_hash(Path(s) / "header.json") for s in shards}
    math_file = _file_hash(cfg.eval.math_file) if cfg.eval.math_file else ""
    # the corpus' language: the math problems', their instruction's and the questions' (pipelines/languages)
    return cache_key(EVAL_CODE_VERSION, weights_sha256(found.path), dataclasses.asdict(cfg.eval), inputs, math_file,
                     qa_key, *([harness_key] if harness_key else []),  # no harness: the keys rows had before it
                     cfg.section_hash("language"))


def _read_row(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # missing, or cut short by a crash: evaluate again
        return None


def evaluate_all(store: DataStore, cfg: YunqueConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Evaluate every checkpoint (or reuse its cached row) and write the report."""
    from model.infer.evaluate import evaluate_checkpoint

    skipped: dict[str, str] = {}
    found = checkpoints(store, skipped)
    if not found:
        raise FileNotFoundError(f"no materialized checkpoints under {store.data}/{{{','.join(eval_report.STAGES)}}}: "
                                "materialize base_model first")
    for stage, why in skipped.items():
        if progress:
            progress(f"not evaluated: {why}")
    out = store.dir(EVAL_REPORT)
    (out / "rows").mkdir(parents=True, exist_ok=True)
    # from validation documents only, clean once eval_contamination ran; none without the language's qa.toml
    qa_pairs = eval_pairs(store, cfg.language)
    if (left := packs.left_out(cfg.language)) and progress:
        progress(left)  # the one line: what this language's pack lacks, and what is left out for it
    include, harness_key = [], ""
    asked = harness.shipped_asked(cfg.eval.harness, cfg.language)
    if asked and not harness.shipped_items(qa_pairs):
        raise FileNotFoundError(f"eval.harness asks for {harness.shipped(cfg.language)}, made from the held-out "
                                f"domain QA pairs, and this home has {len(qa_pairs)} (at least {harness.CHOICES} "
                                "are needed)")
    if cfg.eval.harness:  # the shipped task from these pairs, and the user's task directories
        shipped = [harness.write_shipped_task(qa_pairs, out / "harness", cfg.language)] if asked else []
        include = [*shipped, *map(Path, cfg.eval.harness_include)]
        harness_key = harness.inputs_key(include, cfg.eval.harness)
    rows, reused = {}, []
    config = cfg.to_dict()
    recipes = {stage: seed_spread.recipe_key(config, stage) for stage in eval_report.STAGES}
    scored_with = seed_spread.eval_key(config)
    for stage, (rec, ckpt) in found.items():
        key = _row_key(ckpt, cfg, pairs_key(qa_pairs), harness_key)
        cached = out / "rows" / f"{stage}-{key}.json"
        row = _read_row(cached)
        fresh = row is None
        if fresh:
            if progress:
                progress(f"evaluating {stage} ({ckpt.path})")
            row = evaluate_checkpoint(ckpt, cfg.eval, progress=progress, qa_pairs=qa_pairs,
                                      language=cfg.language) | {"eval_key": key}
            if cfg.eval.harness:
                if progress:
                    progress(f"lm-evaluation-harness on {stage}: {', '.join(cfg.eval.harness)}")
                row["harness"] = harness.on_checkpoint(ckpt.path, cfg.eval.harness, include, cfg.eval.harness_limit)
        else:
            reused.append(stage)
        stale = outdated(store, rec)  # not cached with the row: a parent retrained later outdates the same weights
        # tagged for the "across seeds" view on its first evaluation in an up-to-date chain
        if seed_spread.tag(row, stage, recipes[stage], scored_with, bool(stale), time.time()) or fresh:
            write_json(cached, row)
        rows[stage] = row | {"mlflow_run_id": rec.get("mlflow_run_id", ""), "weights_sha256": rec["weights_sha256"],
                             "dagster_run_id": rec.get("dagster_run_id", ""), "outdated": stale}
    records = {stage: read_metrics(store.dir(stage)) for stage in found}
    report = eval_report.build(rows, records, cfg.eval.overfit_window, cfg.eval.repetition_threshold)
    history = [r for r in map(_read_row, sorted((out / "rows").glob("*.json"))) if r]
    report["across_seeds"] = seed_spread.spread(history, recipes, scored_with)
    if left:
        report["left_out"] = left
    paths = eval_report.write(report, records, out)
    store.publish(EVAL_REPORT)
    return {"report": report, "paths": paths, "reused": reused, "skipped": skipped,
            "records": {s: rec for s, (rec, _) in found.items()},
            "checkpoints": {s: str(c.path) for s, (_, c) in found.items()}}


def export_latest(store: DataStore, cfg: YunqueConfig) -> dict:
    """Export the last materialized stage of the chain and load the export back in
    transformers (model.export.check); refuse an outdated chain, naming what to
    re-materialize. Memoised on the weights and the export settings: an unchanged
    checkpoint is neither re-exported nor re-checked. The record (yunque_export.json)
    names its source and carries the source's lineage, so a copied export still has it."""
    from model.checkpoint.load import load
    from model.export.check import check_export
    from model.export.hf import RECORD_FILE, export_hf

    found = checkpoints(store)
    if not found:
        raise FileNotFoundError("no materialized checkpoint to export: materialize base_model first")
    stage, (source, found_ckpt) = list(found.items())[-1]
    if stale := outdated(store, source):
        why = "; ".join(f"{a}: {w}" for a, w in stale.items())
        raise LineageError(f"exported_model: {stage} was trained from an outdated chain ({why}); re-materialize "
                           f"{', '.join(stale)} (in that order), then exported_model")
    path = found_ckpt.path
    out = store.dir(EXPORTED_MODEL)
    key = cache_key(EXPORT_CODE_VERSION, weights_sha256(path), dataclasses.asdict(cfg.export), list(cfg.eval.prompts))
    record = _read_row(out / RECORD_FILE)
    if record and record.get("export_key") == key and all((out / f).exists() for f in record["files"]):
        return {**record, "cached": True}
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    loaded = load(found_ckpt)
    lineage = {"source": {"asset": stage, "checkpoint": str(path), "step": found_ckpt.step,
                          "weights_sha256": source["weights_sha256"]}, "lineage": source}
    record = export_hf(loaded, tmp, cfg.export.dtype, cfg.export.gguf, lineage=lineage)
    ggufs = [f for f in record["files"] if f.endswith(".gguf")]
    record |= {"stage": stage, "dir": str(out), "weights_hash": weights_sha256(path), "export_key": key,
               "checks": check_export(loaded, tmp, cfg.eval.prompts, ggufs, cfg.export.dtype)}
    (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2))
    shutil.rmtree(out, ignore_errors=True)  # no stale files from an earlier export (a GGUF now off)
    tmp.rename(out)
    store.publish(EXPORTED_MODEL)
    return {**record, "cached": False}
