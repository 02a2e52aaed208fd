"""Ratings reach a model: with the chat page's ratings in the home, the feedback sensor
requests align_on_feedback once enough are new; that run (the job itself, through Dagster)
turns them into human_preferences, trains sft_model, reward_model and dpo_model on them
mixed with the synthetic data, carries on through PPO, GRPO, the evaluation and the export
to the promotion check; the lineage names the feedback version, and so does the export a
server serves. A manual materialization of human_preferences uses no rating up, and marks
everything from sft_model to promoted_model stale."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pipelines.feedback.records import FeedbackLog
from tests.support.post_homes import SMALL, recorded_base_home
from yunque.cli.lineage import describe, render

QUESTIONS = ["¿Cuánto es 2 más 3?", "¿Cuánto es 7 menos 4?", "¿Qué es un paquete?", "Hola", "¿Cuánto es 6 por 2?",
             "¿Cuánto es 9 más 1?", "¿Qué es un fichero?", "Buenos días", "¿Cuánto es 8 menos 5?"]
ALIGNED = ["sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model", "eval_report", "exported_model",
           "promoted_model"]


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A home with a recorded base model, as the post-training chain's tests have it."""
    return recorded_base_home(tmp_path, monkeypatch)


def _rate(log: FeedbackLog, i: int) -> None:
    answers = [{"model": "champion", "version": "1", "weights_sha256": "a" * 64, "text": f"respuesta buena {i}"},
               {"model": "candidate", "version": "-", "weights_sha256": "b" * 64, "text": f"respuesta mala {i}"}]
    log.append({"id": f"r{i}", "kind": "compare", "messages": [{"role": "user", "content": QUESTIONS[i]}],
                "answers": answers, "choice": "a", "edited": f"La mejor respuesta {i}." if i % 2 else None})


def test_enough_new_ratings_retrain_the_alignment_chain_up_to_the_promotion_check(home):
    from assets.definitions import build_resources, definitions_with
    from stages.data.human_preferences import feedback_dir
    from stages.store.outputs import DataStore

    overrides = SMALL | {"feedback.min_new_ratings": 4}
    defs = definitions_with(build_resources(home=str(home), corpus=str(home / "corpus"),
                                            overrides=json.dumps(overrides)))
    instance = dg.DagsterInstance.get()
    sensor = defs.get_sensor_def("feedback_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # on only when a person turns it on
    resources = {"settings": defs.resources["settings"]}
    log = FeedbackLog(feedback_dir(DataStore(home)))
    for i in range(3):
        _rate(log, i)
    tick = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(tick, dg.SkipReason) and "3 new rating(s) of 4 needed" in tick.skip_message
    for i in range(3, 5):
        _rate(log, i)
    request = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(request, dg.RunRequest) and request.tags["yunque/new_ratings"] == "5"

    result = defs.resolve_job_def("align_on_feedback").execute_in_process(
        instance=instance, tags=request.tags, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]

    md = {k: v.value for k, v in result.asset_materializations_for_node("human_preferences")[0].metadata.items()}
    version = md["feedback_version"]
    # 5 winners, and 2 edited answers each over both shown answers
    assert md["ratings"] == 5 and md["preference_pairs"] == 9 and md["sft_conversations"] == 5
    data = home / "data"
    for asset, examples in (("sft_model", 5), ("reward_model", 9), ("dpo_model", 9)):
        config = json.loads((data / asset / "train_config.json").read_text())
        assert config["human"] == str(data / asset / "mixture" / "human.jsonl"), asset
        record = json.loads((data / asset / "materialized.json").read_text())
        human = record["inputs"]["human_preferences"]
        assert (human["version"], human["examples"], human["weight"]) == (version, examples, 1.0), asset
        plan = {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}["plan"]
        assert "human" in plan, asset  # the plan shows how many human examples beside the synthetic ones
    shown = render(describe(data / "dpo_model"))
    assert f"feedback        version {version} (5 ratings: 9 examples, weight 1.0)" in shown
    # the chain went on to the promotion decision: no champion yet, so the export is promoted
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["no_regression"].passed
    assert result.asset_materializations_for_node("promoted_model")
    assert json.loads((data / "promoted_model" / "champion.json").read_text())["version"] == "1"

    again = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(again, dg.SkipReason) and "0 new rating(s)" in again.skip_message
    # what `yunque serve` tells of the export: the ratings it was aligned on
    from stages.training.lineage import ratings_trained_on

    export = json.loads((data / "exported_model" / "yunque_export.json").read_text())
    assert ratings_trained_on(export["lineage"]) == {"version": version, "ratings": 5}

    # four more ratings, and human_preferences materialized by hand (the UI's Materialize)
    for i in range(5, 9):
        _rate(log, i)
    by_hand = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey("human_preferences")}).execute_in_process(instance=instance)
    md = {k: v.value for k, v in by_hand.asset_materializations_for_node("human_preferences")[0].metadata.items()}
    assert (md["ratings"], md["ratings_waiting"], md["ratings_in_models"]) == (9, 4, 5)
    assert _stale(defs, instance) == {a: "STALE" for a in ALIGNED}  # up to the promotion
    # the sensor still counts them: they are in no trained model
    request = sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert isinstance(request, dg.RunRequest) and request.tags["yunque/new_ratings"] == "4"


def _stale(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, str]:
    """Each asset's status as the UI shows it (its stale-status resolver)."""
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._time import get_current_datetime

    graph = defs.resolve_asset_graph()
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=graph)
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)
    return {a: resolver.get_status(dg.AssetKey(a)).name for a in ALIGNED}
