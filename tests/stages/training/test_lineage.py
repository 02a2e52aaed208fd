"""Lineage by version on a real chain built once for the module: two shards through the
data stages, base_model and sft_model trained by torchrun under Dagster, the export.
Later stages consume the recorded checkpoint only; `yunque lineage` leads back to the
raw shards; MLflow runs share the lineage tags; a retrained base outdates the chain."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from model.checkpoint.files import Checkpoint
from stages.store.outputs import DataStore
from stages.training.lineage import LineageError, read_record, record_materialized
from stages.training.runs import RunSpec
from stages.training.selection import consumed_checkpoint
from tests.support.cli import yunque
from tests.support.factory import SMALL_POST, SMALL_TRAIN, write_two_shards
from yunque import env

OVERRIDES = {"tokenizer.vocab_size": 512, "tokenizer.val_fraction": 0.3, "model.context": 384, **SMALL_TRAIN,
             **SMALL_POST, "eval.math_problems": 4, "eval.sample_tokens": 8, "eval.math_max_new_tokens": 12,
             "eval.val_batches": 1, "export.gguf": []}
SHARDS = ("foro", "manuales")


def _materialize(home: Path, corpus: Path, keys: tuple[str, ...], **extra) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = build_resources(home=str(home), corpus=str(corpus), overrides=json.dumps({**OVERRIDES, **extra}))
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
                          instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)


def _base(home: Path, corpus: Path, **extra) -> dg.ExecuteInProcessResult:
    result = _materialize(home, corpus, ("base_model",), **extra)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    # the asset records its lineage itself (a new run first moves the old record to previous/<key>/)
    assert read_record(DataStore(home), "base_model") is not None, "base_model wrote no lineage record"
    return result


def _md(result, key: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(key)[0].metadata.items()}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage")
    saved = {k: os.environ.get(k) for k in ("YUNQUE_HOME", "DAGSTER_HOME")}
    home, corpus = env.use_home(root / "home"), root / "corpus"
    write_two_shards(corpus)
    from orchestration.runner import run_graph

    summary = run_graph(str(corpus), select="+key:token_shards", overrides=json.dumps(OVERRIDES))
    assert summary.ok, [r["error"] for r in summary.runs if not r["ok"]]
    base = _base(home, corpus)
    sft = _materialize(home, corpus, ("sft_model", "exported_model"))
    assert sft.success, [e.message for e in sft.all_events if e.is_failure]
    yield {"home": home, "corpus": corpus, "root": root, "base": base, "sft": sft}
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _data_versions(store: DataStore) -> tuple[dict, dict]:
    versions = {s: store.manifest("token_shards", s)["key"] for s in SHARDS}
    fingerprints = {s: store.manifest("raw_documents", s)["stats"]["extra"]["fingerprint"] for s in SHARDS}
    assert all(fingerprints.values())
    return versions, fingerprints


def test_lineage_of_a_post_training_checkpoint_and_of_a_copied_export(chain, tmp_path):
    home = chain["home"]
    store = DataStore(home)
    versions, fingerprints = _data_versions(store)
    base, sft = read_record(store, "base_model"), read_record(store, "sft_model")
    assert sft["parent"] == base and sft["dagster_run_id"] == chain["sft"].run_id
    assert base["inputs"]["token_shards"] == versions and base["inputs"]["shard_fingerprints"] == fingerprints

    ckpt = home / "data" / "sft_model" / "step-00000002"
    p = yunque("lineage", str(ckpt), "--json")
    assert p.returncode == 0, p.stderr
    view = json.loads(p.stdout)
    assert view["recorded"] and view["outdated"] == {}
    assert [(e["asset"], e["step"], e["weights_sha256"], e["dagster_run_id"]) for e in view["chain"]] == \
        [(r["asset"], r["step"], r["weights_sha256"], r["dagster_run_id"]) for r in (sft, base)]
    assert view["chain"][0]["mlflow_run_id"] == sft["mlflow_run_id"] != ""
    assert view["data"]["token_shards"] == versions and view["data"]["shard_fingerprints"] == fingerprints
    text = yunque("lineage", str(ckpt)).stdout
    assert all(s in text and versions[s] in text and fingerprints[s] in text for s in SHARDS), text
    assert base["inputs"]["tokenizer_hash"] in text and "current: every stage" in text

    # the export carries it: a copy elsewhere still leads back to the raw shards
    copy = tmp_path / "exported"
    shutil.copytree(home / "data" / "exported_model", copy)
    p = yunque("lineage", str(copy), "--json")
    assert p.returncode == 0, p.stderr
    view = json.loads(p.stdout)
    assert view["kind"] == "export" and [e["asset"] for e in view["chain"]] == ["sft_model", "base_model"]
    assert view["chain"][0]["weights_sha256"] == sft["weights_sha256"]
    assert view["data"]["shard_fingerprints"] == fingerprints and view["outdated"] is None  # no home to compare

    # an earlier step of the same run is not what later stages consumed, and says so
    from yunque.cli.lineage import describe

    older = describe(home / "data" / "base_model" / "step-00000002")
    assert not older["recorded"] and "NOT the recorded checkpoint" in older["note"] and "step 4" in older["note"]
    assert older["data"]["token_shards"] == versions


def test_mlflow_runs_of_base_and_post_training_carry_the_same_lineage_tags(chain):
    from mlflow.tracking import MlflowClient

    store = DataStore(chain["home"])
    client = MlflowClient(f"sqlite:///{chain['home']}/mlflow/mlflow.db")
    base, sft = read_record(store, "base_model"), read_record(store, "sft_model")
    tags = {a: client.get_run(r["mlflow_run_id"]).data.tags for a, r in (("base", base), ("sft", sft))}

    def data_tags(t: dict) -> dict:
        return {k: v for k, v in t.items() if k.startswith(("yunque.token_shards.", "yunque.shard_fingerprint.",
                                                             "yunque.tokenizer_version"))}

    versions, fingerprints = _data_versions(store)
    assert data_tags(tags["base"]) == data_tags(tags["sft"]) == {
        "yunque.tokenizer_version": base["inputs"]["tokenizer_hash"],
        **{f"yunque.token_shards.{s}": v for s, v in versions.items()},
        **{f"yunque.shard_fingerprint.{s}": fp for s, fp in fingerprints.items()}}
    # the post-training run names the weights it started from and the Dagster run that made them
    assert tags["sft"]["yunque.base.weights"] == base["weights_sha256"]
    assert tags["sft"]["yunque.base.dagster_run"] == base["dagster_run_id"]
    params = client.get_run(sft["mlflow_run_id"]).data.params
    assert params["train.steps"] == "2" and not any(k.startswith("lineage.") for k in params)


def test_consumed_checkpoint_takes_only_a_recorded_finished_intact_one(chain, tmp_path):
    store = DataStore(tmp_path)  # a copy of the base run: this test breaks it on purpose
    shutil.copytree(chain["home"] / "data" / "base_model", store.dir("base_model"))
    assert consumed_checkpoint(store, "base_model").step == 4
    run = json.loads((store.dir("base_model") / "run.json").read_text())
    spec = RunSpec("base_model", store.dir("base_model"), run["key"], run["config"], run["lineage"])

    weights = store.dir("base_model") / "step-00000004" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(LineageError, match=r"base_model: the recorded checkpoint .*step-00000004 is damaged"):
        consumed_checkpoint(store, "base_model")
    shutil.rmtree(weights.parent)
    with pytest.raises(LineageError, match=r"step-00000004 is missing: re-materialize base_model"):
        consumed_checkpoint(store, "base_model")
    # a record of a step short of its run's last: an unfinished run is never consumed
    record_materialized(store, "base_model", spec, Checkpoint(store.dir("base_model") / "step-00000002", 2), "x", "")
    with pytest.raises(LineageError, match=r"step 2 of a 4-step run \(unfinished\): materialize base_model"):
        consumed_checkpoint(store, "base_model")
    # checkpoints but no record: the newest on disk is not taken
    (store.dir("base_model") / "materialized.json").unlink()
    with pytest.raises(LineageError, match=r"checkpoints up to step 2 of 4 but no materialized.json.*materialize "
                                           r"base_model first"):
        consumed_checkpoint(store, "base_model")
    with pytest.raises(LineageError, match=r"no materialized sft_model under .*: materialize sft_model first"):
        consumed_checkpoint(store, "sft_model")


def test_a_retrained_base_outdates_the_chain(chain):
    """Base retrained, SFT not: eval_report marks SFT outdated (a column, a failed check,
    a tag) and exported_model refuses, naming what to re-materialize. Runs last: it
    changes the module's home."""
    home, corpus = chain["home"], chain["corpus"]
    store = DataStore(home)
    old_base = read_record(store, "base_model")
    _base(home, corpus, **{"train.steps": 2})
    new_base = read_record(store, "base_model")
    assert new_base["weights_sha256"] != old_base["weights_sha256"]

    result = _materialize(home, corpus, ("eval_report", "exported_model"), **{"train.steps": 2})
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "exported_model"
    message = failure.step_failure_data.error.message
    assert "outdated chain" in message and "re-materialize sft_model" in message, message

    md = _md(result, "eval_report")
    assert md["stages"] == ["base_model", "sft_model"] and md["outdated"] == ["sft_model"]
    check = next(c for c in result.get_asset_check_evaluations() if c.check_name == "outdated_chain")
    assert not check.passed
    report = json.loads((home / "data" / "eval_report" / "report.json").read_text())
    assert {r["stage"]: r["outdated"] for r in report["table"]} == {"base_model": "no", "sft_model": "yes"}

    from mlflow.tracking import MlflowClient

    tags = MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db").get_run(md["mlflow_run_id"]).data.tags
    assert tags["yunque.outdated"] == "sft_model" and tags["yunque.base.weights"] == new_base["weights_sha256"]
    assert tags["yunque.sft.weights"] == read_record(store, "sft_model")["weights_sha256"]

    from yunque.cli.lineage import describe

    assert list(describe(home / "data" / "sft_model")["outdated"]) == ["sft_model"]


def test_outdated_follows_every_parent_and_the_reward_model(tmp_path):
    """The staleness rule on records alone: a stage is outdated when a parent it consumed
    (the reward model included) is no longer that parent's record, or is outdated itself;
    what to re-materialize comes parents first."""
    from stages.store.outputs import write_json
    from stages.training.lineage import outdated

    store = DataStore(tmp_path)
    parents = {"sft_model": "base_model", "reward_model": "sft_model", "dpo_model": "sft_model",
               "ppo_model": "dpo_model", "grpo_model": "ppo_model"}

    def materialize(asset: str, weights: str) -> dict:
        rec = {"asset": asset, "weights_sha256": weights, "dagster_run_id": f"run-{weights}"}
        if asset in parents:
            rec["parent"] = read_record(store, parents[asset])
        if asset == "ppo_model":
            rec["reward_model"] = read_record(store, "reward_model")
        store.dir(asset).mkdir(parents=True, exist_ok=True)
        write_json(store.dir(asset) / "materialized.json", rec)
        return rec

    for asset in ("base_model", *parents):
        materialize(asset, "1")
    assert outdated(store, read_record(store, "grpo_model")) == {}
    materialize("reward_model", "2")  # the reward model retrained: PPO and what came from it
    stale = outdated(store, read_record(store, "grpo_model"))
    assert list(stale) == ["ppo_model", "grpo_model"]
    assert "trained from reward_model weights 1, but reward_model is now 2 (dagster run run-2)" in stale["ppo_model"]
    assert stale["grpo_model"] == "trained from ppo_model, which is outdated"
    materialize("base_model", "2")  # the base retrained: everything after it
    assert list(outdated(store, read_record(store, "grpo_model"))) == \
        ["sft_model", "dpo_model", "reward_model", "ppo_model", "grpo_model"]
    assert outdated(store, read_record(store, "base_model")) == {}
    (store.dir("dpo_model") / "materialized.json").unlink()  # DPO's run restarted, not finished
    stale = outdated(store, read_record(store, "ppo_model"))
    assert list(stale) == ["sft_model", "dpo_model", "reward_model", "ppo_model"]
    assert stale["dpo_model"] == "dpo_model has no materialized record"
