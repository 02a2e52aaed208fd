"""promoted_model as a stage (no Dagster): the candidate (the export and the evaluation
report's row for the stage it was exported from), whether it may replace the champion
(its figures against the champion's, within `promotion` tolerances), and the champion's
record.

    data/promoted_model/champion.json   the current champion: its registry version, the
                                        export's weights hash, the figures it was promoted
                                        on, when and why; written atomically

MLflow's model registry (the version, the alias) is resources.tracking's; this module
decides and keeps the record that the no_regression check and the CLI read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.asset_names import EVAL_REPORT, EXPORTED_MODEL, PROMOTED_MODEL
from stages.config import PromotionConfig
from stages.store.outputs import DataStore, write_json

PROMOTION_CODE_VERSION = "1"
CHAMPION_FILE = "champion.json"
REPORT_FILE = "report.json"  # stages.evaluation.report.write
EXPORT_RECORD = "yunque_export.json"  # model.export.hf.RECORD_FILE, whose module imports torch
FIGURES = ("val_loss", "val_ppl", "val_bpb", "math_accuracy")
# figures at a limit pass: 1.2 * 1.01 is 1.2120000000000002 in floats, 0.30 - 0.02 is 0.27999999999999997
_EPS = 1e-9


class PromotionError(RuntimeError):
    """The export cannot be judged: no export, no report, or a report that evaluated other
    weights than the export holds. The message says what to materialize."""


@dataclass(frozen=True)
class Candidate:
    stage: str
    step: int
    weights_hash: str  # sha256 of the exported checkpoint's model.safetensors
    export_key: str
    export_dir: Path
    figures: dict[str, float | None]  # FIGURES, from the report's row for `stage`


@dataclass(frozen=True)
class Comparison:
    metric: str
    candidate: float | None
    champion: float | None
    limit: float | None  # None: not compared (either side not measured, or no rule)
    ok: bool
    sentence: str


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    comparisons: tuple[Comparison, ...] = ()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:  # both files are written in one rename: only a hand edit gets here
        raise PromotionError(f"{path} is not valid JSON ({e})") from e


def champion_path(store: DataStore) -> Path:
    return store.dir(PROMOTED_MODEL) / CHAMPION_FILE


def read_champion(store: DataStore | str | Path | None = None) -> dict[str, Any] | None:
    """The current champion's record (see write_champion), or None before the first
    promotion. Takes a store or a Yunque home (None: $YUNQUE_HOME); reads one file, with
    neither Dagster nor MLflow nor torch, so a command line can answer quickly."""
    store = store if isinstance(store, DataStore) else DataStore(store)
    return _read_json(champion_path(store))


def candidate(store: DataStore) -> Candidate:
    """The export in data/exported_model and its figures from data/eval_report/report.json:
    the row of the stage it was exported from, which must have evaluated the same weights."""
    export_dir = store.dir(EXPORTED_MODEL)
    record = _read_json(export_dir / EXPORT_RECORD)
    if record is None:
        raise PromotionError(f"no export in {export_dir}: materialize exported_model first")
    stage = record["stage"]
    weights = record.get("weights_hash") or record.get("source", {}).get("weights_sha256", "")
    report_path = store.dir(EVAL_REPORT) / REPORT_FILE
    report = _read_json(report_path)
    if report is None:
        raise PromotionError(f"no evaluation report at {report_path}: materialize eval_report")
    row = report.get("rows", {}).get(stage)
    figures = next((r for r in report.get("table", []) if r.get("stage") == stage), None)
    if row is None or figures is None:
        raise PromotionError(f"{report_path} has no row for {stage}, the stage exported_model holds: "
                             "materialize eval_report")
    # rows carry the weights they measured; older rows only the checkpoint's path
    same = row["weights_sha256"] == weights if "weights_sha256" in row else row.get("checkpoint") == record.get(
        "checkpoint")
    if not same:
        raise PromotionError(f"eval_report's {stage} row measured other weights ({row.get('checkpoint')}) than "
                             f"exported_model holds ({record.get('checkpoint')}, weights {weights[:12]}): "
                             "materialize eval_report")
    return Candidate(stage=stage, step=int(record.get("step", row.get("step", 0))), weights_hash=weights,
                     export_key=record.get("export_key", ""), export_dir=export_dir,
                     figures={k: figures.get(k) for k in FIGURES}
                     | {k: v for k, v in figures.items() if k.endswith(".acc")})  # the harness tasks' accuracy


def _bpb(cand: float | None, champ: float | None, tolerance: float) -> Comparison:
    if cand is None or champ is None:
        return Comparison("val_bpb", cand, champ, None, True, f"val_bpb {_f(cand)} vs champion {_f(champ)}: "
                                                              "not measured on both, not compared")
    limit = champ * (1 + tolerance)
    ok = cand <= limit + _EPS * abs(limit)
    return Comparison("val_bpb", cand, champ, limit, ok, f"val_bpb {_f(cand)} {'<=' if ok else '>'} {_f(limit)} "
                                                        f"(champion {_f(champ)} + {tolerance:.1%})")


def _at_least(metric: str, cand: float | None, champ: float | None, tolerance: float) -> Comparison:
    """An accuracy may be at most `tolerance` below the champion's."""
    if cand is None or champ is None:
        return Comparison(metric, cand, champ, None, True, f"{metric} {_f(cand)} vs champion {_f(champ)}: not "
                                                           "measured on both, not compared")
    limit = champ - tolerance
    ok = cand >= limit - _EPS
    return Comparison(metric, cand, champ, limit, ok, f"{metric} {_f(cand)} {'>=' if ok else '<'} {_f(limit)} "
                                                      f"(champion {_f(champ)} - {tolerance:g})")


def decide(cand: Candidate, champion: dict[str, Any] | None, cfg: PromotionConfig) -> Verdict:
    """May `cand` replace `champion`? Yes when there is none, when it is the champion's
    own weights, or when val_bpb <= champion * (1 + max_bpb_increase) and math_accuracy >=
    champion - max_accuracy_drop (a figure missing on either side is not compared)."""
    figs = cand.figures
    if champion is None:
        return Verdict(True, "no champion yet: the first evaluated export becomes the champion",
                       (_bpb(figs["val_bpb"], None, 0), _at_least("math_accuracy", figs["math_accuracy"], None, 0)))
    prev = champion.get("figures", {})
    comps = (_bpb(figs["val_bpb"], prev.get("val_bpb"), cfg.max_bpb_increase),
             _at_least("math_accuracy", figs["math_accuracy"], prev.get("math_accuracy"), cfg.max_accuracy_drop))
    if cfg.harness_max_drop is not None:  # an optional criterion: each harness task's accuracy
        comps += tuple(_at_least(k, figs[k], prev.get(k), cfg.harness_max_drop) for k in sorted(figs)
                       if k.endswith(".acc"))
    if champion.get("weights_hash") == cand.weights_hash:
        return Verdict(True, f"the export is the champion's weights (version {champion.get('version')})", comps)
    failed = [c for c in comps if not c.ok]
    if failed:
        return Verdict(False, f"regression against version {champion.get('version')}: "
                              + "; ".join(c.sentence for c in failed), comps)
    return Verdict(True, f"no regression against version {champion.get('version')}: "
                         + "; ".join(c.sentence for c in comps), comps)


def comparison_markdown(verdict: Verdict, cand: Candidate, champion: dict[str, Any] | None) -> str:
    """Candidate and champion figures side by side, with the limit each had to meet."""
    limits = {c.metric: c for c in verdict.comparisons}
    head = f"champion v{champion.get('version')}" if champion else "champion (none)"
    prev = (champion or {}).get("figures", {})
    lines = [f"| figure | candidate ({cand.stage} step {cand.step}) | {head} | limit | |", "|---|---|---|---|---|"]
    for k in [*FIGURES, *sorted(k for k in cand.figures if k not in FIGURES)]:
        c = limits.get(k)
        rule = "" if c is None or c.limit is None else ("≤ " if k == "val_bpb" else "≥ ") + _f(c.limit)
        mark = "" if c is None or c.limit is None else ("ok" if c.ok else "**regression**")
        lines.append(f"| {k} | {_f(cand.figures.get(k))} | {_f(prev.get(k))} | {rule} | {mark} |")
    return "\n".join(lines) + f"\n\n{'Passed' if verdict.passed else 'Failed'}: {verdict.reason}\n"


def champion_record(cand: Candidate, verdict: Verdict, version: str, *, cfg: PromotionConfig, model_uri: str,
                    mlflow_run_id: str, previous: dict[str, Any] | None) -> dict[str, Any]:
    """What champion.json holds after `cand` is promoted as registry version `version`."""
    prev = None if previous is None else {k: previous.get(k) for k in ("version", "weights_hash", "figures")}
    return {"format": 1, "registered_model": cfg.registered_model, "alias": cfg.alias, "version": str(version),
            "model_uri": model_uri, "mlflow_run_id": mlflow_run_id, "stage": cand.stage, "step": cand.step,
            "weights_hash": cand.weights_hash, "export_key": cand.export_key, "figures": cand.figures,
            "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "reason": verdict.reason,
            "previous": prev}


def write_champion(store: DataStore, record: dict[str, Any]) -> Path:
    path = champion_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    store.publish(PROMOTED_MODEL)
    return path


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.5g}"
