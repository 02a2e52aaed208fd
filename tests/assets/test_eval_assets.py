"""eval_report and exported_model through Dagster on a small checkpoint: materialize(),
the report files, the checks, the MLflow run, and memoisation on the weights."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from tests.support.factory import answering_checkpoint, record_base
from yunque import env

ANSWER = 47  # the base model's reply to every problem; 24 problems: 1 of the set, 2 of its rephrasings
EVAL = {"eval.math_problems": 24, "eval.sample_tokens": 12, "eval.math_max_new_tokens": 12, "eval.val_batches": 2,
        "export.gguf": ["q8_0"]}


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    h = env.use_home(tmp_path / "home")
    # data/base_model/step-00000010, its record and data/tokenizer, as training leaves them: a
    # model that answers ANSWER to everything, so that its math accuracy is known in advance
    record_base(answering_checkpoint(h / "data", ANSWER))
    return h


def _materialize(home, keys=("eval_report", "exported_model"), extra: dict | None = None) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = build_resources(home=str(home), corpus=str(home / "corpus"), overrides=json.dumps(EVAL | (extra or {})))
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
                          instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)


def _md(result, key: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(key)[0].metadata.items()}


def test_report_and_export_materialize(home):
    result = _materialize(home)
    assert result.success
    md = _md(result, "eval_report")
    assert md["stages"] == ["base_model"] and md["reused_rows"] == []
    out = home / "data" / "eval_report"
    report = json.loads((out / "report.json").read_text())
    row = report["rows"]["base_model"]
    assert row["step"] == 10 and row["math_problems"] == 24 and len(row["samples"]) == 5
    assert row["math"]["es_add2"]["problems"] == 24
    # the metadata is the report's table: every number of the row, as report.json has it
    from assets.evaluation.report import NUMERIC
    from stages.evaluation.promotion import FIGURES

    table = next(r for r in report["table"] if r["stage"] == "base_model")
    numbers = {c: table[c] for c in NUMERIC if isinstance(table[c], (int, float))}
    assert {"math_accuracy", "math_rephrased", "format_rate", "repeat_4_max"} <= numbers.keys()
    assert md["figures"]["base_model"] == numbers
    # the only numbers (what the UI plots across materializations): the last stage's FIGURES
    assert md["last_stage"] == "base_model"
    assert {k: v for k, v in md.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} == {
        f"last_stage/{c}": numbers[c] for c in FIGURES if c in numbers}
    assert {"plot: held-out math accuracy by checkpoint", "figures by checkpoint"} <= md.keys()
    # ... and the accuracies are what the model's one answer earns on each problem set (the
    # same task in held-out wordings for math_rephrased): worked out here from the sets alone
    from pipelines.tasks.math_tasks import math_eval_set

    expected = {name: round(sum(p.answer == ANSWER for p in math_eval_set(name, 24, seed=0)) / 24, 4)
                for name in ("es_add2", "es_add2_rephrased")}
    assert 0 < expected["es_add2"] != expected["es_add2_rephrased"] > 0  # a check that can tell them apart
    assert numbers["math_accuracy"] == row["math_accuracy"] == expected["es_add2"], expected
    assert numbers["math_rephrased"] == row["math_rephrased"] == expected["es_add2_rephrased"]
    assert numbers["format_rate"] == row["math"]["es_add2"]["format_rate"] == 1.0  # every reply in <answer> tags
    assert row["math"]["es_add2"]["correct"] == round(expected["es_add2"] * 24)
    assert all(e["predicted"] == ANSWER and e["correct"] == (e["expected"] == ANSWER)
               for e in row["math"]["es_add2"]["examples"] + row["math"]["es_add2_rephrased"]["examples"])
    assert "| base_model | 10 |" in (out / "report.md").read_text()
    assert (out / "math_accuracy.png").stat().st_size > 1000

    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {"val_loss_rising", "overfitting", "repetition", "outdated_chain", "transformers_logits_match",
            "gguf_logits_match"} <= checks.keys()
    assert checks["transformers_logits_match"].passed and checks["gguf_logits_match"].passed
    assert checks["outdated_chain"].passed and md["outdated"] == [] and row["outdated"] == {}

    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(md["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["dagster.asset_key"] == "eval_report"
    assert "base_model.math_accuracy" in run.data.metrics

    exp = _md(result, "exported_model")
    assert exp["architecture"] == "LlamaForCausalLM" and exp["cached"] is False
    # the export names its source and carries the source's record (its lineage travels with it)
    base = json.loads((home / "data" / "base_model" / "materialized.json").read_text())
    saved = json.loads((home / "data" / "exported_model" / "yunque_export.json").read_text())
    assert saved["source"] == {"asset": "base_model", "checkpoint": base["checkpoint"], "step": 10,
                               "weights_sha256": base["weights_sha256"]} and saved["lineage"] == base
    assert exp["weights_sha256"] == base["weights_sha256"]
    assert set(exp["files"]) == {"model.safetensors", "model-q8_0.gguf"}
    assert exp["max_abs_logit_diff"] <= 1e-4

    # Unchanged weights: the row is reused, the export neither rewritten nor re-checked.
    again = _materialize(home)
    assert again.success
    assert _md(again, "eval_report")["reused_rows"] == ["base_model"]
    assert _md(again, "exported_model")["cached"] is True


def test_the_harness_results_are_in_the_report_and_in_mlflow(home, tmp_path):
    """eval.harness with a task of the user's own directory: eval_report runs the harness on
    the checkpoint's export, offline, and its accuracy is a column of the report's table, a
    metadata figure and an MLflow metric."""
    from tests.support.user_tasks import user_task

    tasks = user_task(tmp_path)
    result = _materialize(home, ("eval_report",), {"eval.harness": ["sumas_es"], "eval.harness_include": [str(tasks)]})
    assert result.success
    report = json.loads((home / "data" / "eval_report" / "report.json").read_text())
    row = report["rows"]["base_model"]
    assert row["harness"]["sumas_es"]["samples"] == 6
    table = next(r for r in report["table"] if r["stage"] == "base_model")
    assert table["sumas_es.acc"] == row["harness"]["sumas_es"]["acc"]
    assert "sumas_es.acc" in (home / "data" / "eval_report" / "report.md").read_text()
    md = _md(result, "eval_report")
    from mlflow.tracking import MlflowClient

    run = MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(md["mlflow_run_id"])
    assert run.data.metrics["base_model.sumas_es.acc"] == table["sumas_es.acc"]


def test_no_checkpoint_is_a_clear_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    h = env.use_home(tmp_path)
    result = _materialize(h, keys=("eval_report",))
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "materialize base_model first" in failure.step_failure_data.error.message
