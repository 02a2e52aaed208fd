"""promoted_model and its blocking no_regression check: the decisions on report.json-shaped
files (no champion, within tolerance, regression, a report that measured other weights),
then through Dagster on a real checkpoint: evaluated, exported, registered in a real
sqlite MLflow registry under the champion alias, not registered twice, and kept out of
the registry by a failed check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest
from mlflow.tracking import MlflowClient

from stages.config import PromotionConfig
from stages.evaluation import report as eval_report
from stages.evaluation.promotion import (
    EXPORT_RECORD,
    PromotionError,
    candidate,
    champion_record,
    comparison_markdown,
    decide,
    read_champion,
    write_champion,
)
from stages.store.outputs import DataStore

TOLERANCE = PromotionConfig(max_bpb_increase=0.01, max_accuracy_drop=0.02)


def _export(store: DataStore, weights: str, stage: str = "base_model", step: int = 10) -> None:
    """data/exported_model as export_latest leaves it (the record's fields we read)."""
    out = store.dir("exported_model")
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.safetensors").write_bytes(weights.encode())
    checkpoint = str(store.dir(stage) / f"step-{step:08d}")
    record = {"checkpoint": checkpoint, "step": step, "files": {"model.safetensors": 64}, "stage": stage,
              "dir": str(out), "weights_hash": weights, "export_key": f"key-{weights[:4]}",
              "source": {"asset": stage, "checkpoint": checkpoint, "step": step, "weights_sha256": weights}}
    (out / EXPORT_RECORD).write_text(json.dumps(record))


def _report(store: DataStore, weights: str, val_bpb: float | None, accuracy: float | None,
            stage: str = "base_model", harness: dict | None = None) -> None:
    """data/eval_report/report.json as evaluate_all writes it (stages.evaluation.report.build)."""
    row = {"checkpoint": str(store.dir(stage) / "step-00000010"), "step": 10, "parameters": 1000,
           "val_loss": None if val_bpb is None else val_bpb * 0.7, "val_ppl": None, "val_bpb": val_bpb,
           "math_accuracy": accuracy, "math_problems": 100, "math_set": "es_add2",
           "math": {"es_add2": {"accuracy": accuracy, "format_rate": 0.9}}, "samples": [],
           "weights_sha256": weights, "outdated": {}, **({"harness": harness} if harness else {})}
    report = eval_report.build({stage: row}, {}, 3, 0.5)
    out = store.dir("eval_report")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report))


def _candidate(store: DataStore, weights: str, val_bpb: float | None, accuracy: float | None):
    _export(store, weights)
    _report(store, weights, val_bpb, accuracy)
    return candidate(store)


def _champion(store: DataStore, weights: str, val_bpb: float, accuracy: float, version: str = "3") -> dict:
    cand = _candidate(store, weights, val_bpb, accuracy)
    record = champion_record(cand, decide(cand, None, TOLERANCE), version, cfg=TOLERANCE,
                             model_uri="models:/yunque@champion", mlflow_run_id="r", previous=None)
    write_champion(store, record)
    return read_champion(store)


def test_the_export_record_name_is_the_exporters():
    from model.export.hf import RECORD_FILE

    assert EXPORT_RECORD == RECORD_FILE


def test_no_champion_passes_and_reads_the_exported_stages_row(tmp_path):
    store = DataStore(tmp_path)
    assert read_champion(tmp_path) is None
    cand = _candidate(store, "a" * 64, 1.25, 0.3)
    assert (cand.stage, cand.step, cand.weights_hash) == ("base_model", 10, "a" * 64)
    assert cand.figures == {"val_loss": 0.875, "val_ppl": None, "val_bpb": 1.25, "math_accuracy": 0.3}
    verdict = decide(cand, None, TOLERANCE)
    assert verdict.passed and verdict.reason.startswith("no champion yet")


@pytest.mark.parametrize("val_bpb, accuracy, passed, named", [
    (1.212, 0.28, True, "no regression against version 3: val_bpb 1.212 <= 1.212"),  # at both limits
    (1.10, 0.50, True, "no regression"),
    (1.2125, 0.30, False, "val_bpb 1.2125 > 1.212 (champion 1.2 + 1.0%)"),
    (1.20, 0.2799, False, "math_accuracy 0.2799 < 0.28"),
    (None, 0.30, True, "val_bpb - vs champion 1.2: not measured on both"),
])
def test_tolerances_against_the_champion(tmp_path, val_bpb, accuracy, passed, named):
    store = DataStore(tmp_path)
    champion = _champion(store, "c" * 64, 1.20, 0.30)
    cand = _candidate(store, "d" * 64, val_bpb, accuracy)
    verdict = decide(cand, champion, TOLERANCE)
    assert verdict.passed is passed
    assert named in verdict.reason
    table = comparison_markdown(verdict, cand, champion)
    assert "| figure | candidate (base_model step 10) | champion v3 | limit | |" in table
    assert ("**regression**" in table) is not passed


def test_harness_accuracy_is_an_optional_criterion(tmp_path):
    """With promotion.harness_max_drop set, each harness task's accuracy may fall at most
    that far below the champion's; unset (the default), it is reported, not judged."""
    import dataclasses

    store = DataStore(tmp_path)
    _export(store, "c" * 64)
    _report(store, "c" * 64, 1.20, 0.30, harness={"yunque_es_qa": {"acc": 0.50, "acc_norm": 0.55}})
    first = candidate(store)
    write_champion(store, champion_record(first, decide(first, None, TOLERANCE), "3", cfg=TOLERANCE,
                                          model_uri="m", mlflow_run_id="r", previous=None))
    champion = read_champion(store)
    assert champion["figures"]["yunque_es_qa.acc"] == 0.50
    _export(store, "d" * 64)
    _report(store, "d" * 64, 1.20, 0.30, harness={"yunque_es_qa": {"acc": 0.40, "acc_norm": 0.45}})
    cand = candidate(store)
    assert decide(cand, champion, TOLERANCE).passed  # not a criterion by default
    strict = dataclasses.replace(TOLERANCE, harness_max_drop=0.05)
    verdict = decide(cand, champion, strict)
    assert not verdict.passed and "yunque_es_qa.acc 0.4 < 0.45 (champion 0.5 - 0.05)" in verdict.reason
    assert "| yunque_es_qa.acc | 0.4 | 0.5 | ≥ 0.45 | **regression** |" in comparison_markdown(verdict, cand, champion)
    assert decide(cand, champion, dataclasses.replace(TOLERANCE, harness_max_drop=0.1)).passed


def test_the_champions_own_weights_pass_whatever_the_figures(tmp_path):
    store = DataStore(tmp_path)
    champion = _champion(store, "c" * 64, 1.20, 0.30)
    _report(store, "c" * 64, 9.0, 0.0)  # evaluated again, worse (another eval config)
    verdict = decide(candidate(store), champion, TOLERANCE)
    assert verdict.passed and "the champion's weights (version 3)" in verdict.reason


def test_a_report_that_does_not_describe_the_export_cannot_judge_it(tmp_path):
    store = DataStore(tmp_path)
    with pytest.raises(PromotionError, match="materialize exported_model first"):
        candidate(store)
    _export(store, "e" * 64)
    with pytest.raises(PromotionError, match="no evaluation report"):
        candidate(store)
    _report(store, "f" * 64, 1.2, 0.3)  # evaluated before the last training: other weights
    with pytest.raises(PromotionError, match="measured other weights .* materialize eval_report"):
        candidate(store)
    _report(store, "e" * 64, 1.2, 0.3, stage="sft_model")
    with pytest.raises(PromotionError, match="no row for base_model"):
        candidate(store)


def test_the_check_passes_an_unjudged_first_export_and_fails_one_against_a_champion(tmp_path):
    from assets.evaluation.promotion import no_regression
    from resources import YunqueSettings

    store, settings = DataStore(tmp_path), YunqueSettings.build(str(tmp_path), "tiny", {})
    _export(store, "e" * 64)
    _report(store, "f" * 64, 1.2, 0.3)  # evaluated before the last training: other weights
    first = no_regression(settings=settings)
    assert first.passed and "measured other weights" in first.description
    _champion(store, "c" * 64, 1.20, 0.30)
    _export(store, "e" * 64)
    _report(store, "f" * 64, 1.2, 0.3)
    assert not no_regression(settings=settings).passed
    _report(store, "e" * 64, 1.2, 0.3)
    judged = no_regression(settings=settings)
    assert judged.passed and judged.metadata["champion_val_bpb"].value == 1.2


# Through Dagster, on a real checkpoint (tests.support.factory) evaluated and exported for real.

EVAL = {"eval.math_problems": 4, "eval.sample_tokens": 8, "eval.math_max_new_tokens": 8, "eval.val_batches": 1,
        "export.gguf": []}
KEYS = ("eval_report", "exported_model", "promoted_model")


@pytest.fixture()
def home(tmp_path, monkeypatch):
    from tests.support.factory import record_base, tiny_checkpoint
    from yunque import env

    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    h = env.use_home(tmp_path / "home")
    record_base(tiny_checkpoint(h / "data"))
    return h


def _materialize(home: Path, keys: tuple[str, ...] = KEYS) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = build_resources(home=str(home), corpus=str(home / "corpus"), overrides=json.dumps(EVAL))
    return dg.materialize([*ASSETS, *CHECKS],
                          selection=dg.AssetSelection.assets(*keys), instance=dg.DagsterInstance.get(),
                          resources=resources, raise_on_error=False)


def _check(result: dg.ExecuteInProcessResult):
    return next(c for c in result.get_asset_check_evaluations() if c.check_name == "no_regression")


def _md(result: dg.ExecuteInProcessResult) -> dict:
    (mat,) = result.asset_materializations_for_node("promoted_model")
    return {k: v.value for k, v in mat.metadata.items()}


def test_promotion_through_dagster(home):
    from tests.support.factory import record_base, tiny_checkpoint

    client = MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db")
    first = _materialize(home)
    assert first.success, [e.message for e in first.all_events if e.is_failure]
    assert _check(first).passed and "no champion yet" in _check(first).description
    md = _md(first)
    assert (md["version"], md["new_version"], md["model_uri"]) == ("1", True, "models:/yunque@champion")
    champion = read_champion(home)
    weights = champion["weights_hash"]
    assert champion["version"] == "1" and champion["figures"]["math_accuracy"] is not None
    mv = client.get_model_version_by_alias("yunque", "champion")
    assert str(mv.version) == "1" and mv.tags["yunque.weights_sha256"] == weights
    run = client.get_run(mv.run_id)
    assert run.info.run_name == "promotion" and run.info.status == "FINISHED"
    assert {"model.safetensors", "config.json"} <= {os.path.basename(f.path)
                                                    for f in client.list_artifacts(mv.run_id, "model")}

    # The same weights again: no new version.
    again = _materialize(home)
    assert again.success and _check(again).passed
    assert (_md(again)["version"], _md(again)["new_version"]) == ("1", False)
    assert len(client.search_model_versions("name='yunque'")) == 1

    # New weights, as good (a random model answers no problem either): version 2.
    record_base(tiny_checkpoint(home / "data", seed=1))
    second = _materialize(home)
    assert second.success and _check(second).passed
    assert _md(second)["version"] == "2" and read_champion(home)["previous"]["version"] == "1"

    # New weights against a champion whose record says it solved every problem: the
    # blocking check fails, promoted_model is skipped, the champion stays version 2.
    record = read_champion(home)
    record["figures"]["math_accuracy"] = 1.0
    write_champion(DataStore(home), record)
    record_base(tiny_checkpoint(home / "data", seed=2))
    third = _materialize(home)
    assert not third.success
    check = _check(third)
    assert not check.passed and "regression against version 2" in check.description
    assert check.metadata["champion_math_accuracy"].value == 1.0
    assert third.asset_materializations_for_node("promoted_model") == []
    steps = {e.step_key for e in third.all_events}
    assert "exported_model_no_regression" in steps and "promoted_model" not in steps  # never started
    assert str(client.get_model_version_by_alias("yunque", "champion").version) == "2"
    assert read_champion(home) == record

    # promoted_model alone (its check not in the run) refuses the same regression itself.
    alone = _materialize(home, ("promoted_model",))
    assert not alone.success
    failure = next(e for e in alone.all_events if e.is_step_failure)
    assert "not promoted: regression against version 2" in failure.step_failure_data.error.message
    assert len(client.search_model_versions("name='yunque'")) == 2
