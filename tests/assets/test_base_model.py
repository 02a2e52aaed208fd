"""base_model through Dagster: materialize() launches real torchrun through Pipes, logs
to a real sqlite MLflow store, caches, refuses an impossible plan, and a cancelled run
leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.support import REPO
from tests.support.factory import SMALL_EVAL, SMALL_TRAIN, write_two_shards
from yunque import env

# validation documents too: the two-shard corpus has ~20 documents
OVERRIDES = {"tokenizer.vocab_size": 512, "tokenizer.val_fraction": 0.3, **SMALL_TRAIN, "train.downstream_every": 2}


@pytest.fixture(scope="module")
def data_home(tmp_path_factory):
    """A home with token shards of the two-shard corpus (the data stages run once)."""
    root = tmp_path_factory.mktemp("base")
    saved = {k: os.environ.get(k) for k in ("YUNQUE_HOME", "DAGSTER_HOME")}
    home = env.use_home(root / "home")
    write_two_shards(root / "corpus")
    from orchestration.runner import run_graph

    summary = run_graph(str(root / "corpus"), select="+key:token_shards", overrides=json.dumps(OVERRIDES))
    assert summary.ok, [r["error"] for r in summary.runs if not r["ok"]]
    yield home, root / "corpus"
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _materialize(home: Path, corpus: Path, overrides: dict, keys: tuple[str, ...] = ("base_model",),
                 **launcher) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources
    from resources import TorchrunLauncher

    os.environ["YUNQUE_HOME"], os.environ["DAGSTER_HOME"] = str(home), str(home / "dagster")
    resources = build_resources(home=str(home), corpus=str(corpus), overrides=json.dumps(overrides))
    if launcher:
        resources["launcher"] = TorchrunLauncher(**launcher)
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
                          instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)


def _mlflow(home: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db")


def test_a_validation_split_too_small_for_one_batch_is_refused_before_training(data_home):
    """A corpus whose validation documents cannot fill one batch would train with no
    validation loss, no early stopping and no perplexity: the plan refuses, saying how
    much text is missing and which setting would do."""
    from stages.config import preset
    from stages.store.outputs import DataStore
    from stages.training.pretrain import prepare
    from stages.training.runs import PretrainError

    home, _ = data_home
    store = DataStore(home)
    with pytest.raises(PretrainError, match=r"validation split holds [\d,]+ tokens in \d+ documents over 2 shards.*"
                                            r"train.batch_size = 4096.*Raise tokenizer.val_fraction \(now 0.3; about"):
        prepare(store, ["foro", "manuales"], preset("tiny", OVERRIDES | {"train.batch_size": 4096}))
    assert not (store.dir("base_model") / "train_config.json").exists() or \
        json.loads((store.dir("base_model") / "train_config.json").read_text())["train"]["batch_size"] != 4096


def test_materialize_tracks_the_run_in_mlflow(data_home):
    home, corpus = data_home
    result = _materialize(home, corpus, OVERRIDES)
    assert result.success
    md = {k: v.value for k, v in result.asset_materializations_for_node("base_model")[0].metadata.items()}
    assert md["step"] == SMALL_TRAIN["train.steps"] and md["cached"] is False
    assert md["val_loss"] > 0 and md["parameters"] > 0 and md["device"] == "cpu"  # reported by rank 0 over Pipes
    assert md["checkpoint"].endswith("step-00000004")
    # the estimate made before launch, per device kind, against the time the run took here
    estimate = {r.data["device"]: r.data for r in md["cost_estimate"].records}
    assert set(estimate) >= {"cpu", "a100", "h100", "h200"} and estimate["h100"]["cost"] >= 0
    assert md["time_device"] == "cpu" and md["time_estimated_s"] == estimate["cpu"]["seconds"] > 0
    assert 0 < md["time_actual_s"] and md["time_actual_over_estimate"] > 0
    assert (md["bad_steps"], md["rollbacks"]) == (0, 0) and "divergence_events" not in md
    assert [r.data["step"] for r in md["downstream_evals"].records] == [2, 4]  # beside the loss curve
    assert 0 < md["downstream_time_share"] < 1
    # how it started, its steps and what it read: one group of every shard for a fresh run
    assert md["start"] == "fresh: no previous run" and md["step_range"] == "0..4" and "continued_from" not in md
    mixture = [r.data for r in md["mixture"].records]
    assert [(r["source"], r["shards"], r["weight"]) for r in mixture] == [("all", "foro, manuales", 1.0)]
    assert mixture[0]["tokens_drawn"] == md["tokens_seen"] and mixture[0]["train_tokens"] > 0

    # the MLflow run: finished, tagged with the Dagster run and the data versions it read
    client = _mlflow(home)
    run = client.get_run(md["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["dagster.run_id"] == result.run_id and tags["dagster.asset_key"] == "base_model"
    instance = dg.DagsterInstance.get()

    def data_version(key: str, partition: str | None = None) -> str:
        recs = instance.fetch_materializations(dg.AssetKey(key), limit=10).records
        rec = next(r for r in recs if r.partition_key == partition)
        return rec.asset_materialization.tags["dagster/data_version"]

    assert tags["yunque.tokenizer_version"] == data_version("tokenizer")
    shards = json.loads(tags["yunque.token_shards_versions"])
    assert shards == {s: data_version("token_shards", s) for s in ("foro", "manuales")}
    assert run.data.params["train.steps"] == "4" and run.data.params["model.vocab_size"] == "512"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 2, 3, 4]
    assert len(client.get_metric_history(run.info.run_id, "val_loss")) == 2  # every 2 steps
    # the downstream evaluations during training, every train.downstream_every (2) steps, with their cost
    for name in ("eval_repeat_4_max", "eval_distinct_2_mean", "eval_seconds", "eval_time_share"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, name)] == [2, 4], name
    share = client.get_metric_history(run.info.run_id, "eval_time_share")[-1].value
    assert 0 < share < 1
    # the domain QA pairs the stage wrote beside the run (this small corpus's validation
    # documents have no sections to make them from; tests/model/pretrain/test_downstream.py scores some)
    pairs = (home / "data" / "base_model" / "downstream_qa.jsonl").read_text().splitlines()
    evaluated = [r for r in map(json.loads, (home / "data" / "base_model" / "metrics.jsonl").read_text().splitlines())
                 if r["event"] == "step" and "eval_seconds" in r]
    assert [r["step"] for r in evaluated] == [2, 4] and {r["eval_domain_qa_pairs"] for r in evaluated} == {len(pairs)}
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"loss_curve.png", "train_config.json",
                                                                       "run.json", "metrics.jsonl"}
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert "val_loss_below_unigram_entropy" in checks

    # the directory resolves to its latest checkpoint, which loads
    from model.checkpoint import state as ckpt

    assert ckpt.latest(home / "data" / "base_model").step == 4

    # unchanged inputs: nothing is trained and no MLflow run is started
    again = _materialize(home, corpus, OVERRIDES)
    assert again.success
    md2 = again.asset_materializations_for_node("base_model")[0].metadata
    assert md2["cached"].value is True and md2["mlflow_run_id"].value == md["mlflow_run_id"]
    assert len(client.search_runs([run.info.experiment_id])) == 1

    # a changed recipe trains afresh; the old run's files are kept under previous/<key>
    longer = _materialize(home, corpus, {**OVERRIDES, "train.steps": 6})
    assert longer.success
    assert ckpt.latest(home / "data" / "base_model").step == 6
    assert (home / "data" / "base_model" / "previous" / md["run_key"] / "step-00000004").is_dir()
    lineage = longer.asset_materializations_for_node("base_model")[0].metadata["lineage"].value
    assert lineage["start"] == "fresh: recipe changed (train.steps)" and lineage["continued_from"] is None


def test_eval_report_measures_what_training_measured(data_home):
    """The report's validation loss is the training run's own, on the same windows."""
    from model.checkpoint import state as ckpt

    home, corpus = data_home
    overrides = {**OVERRIDES, **SMALL_EVAL, "eval.val_batches": OVERRIDES["train.eval_batches"]}
    result = _materialize(home, corpus, overrides, keys=("base_model", "eval_report"))
    assert result.success
    md = {k: v.value for k, v in result.asset_materializations_for_node("eval_report")[0].metadata.items()}
    trained = ckpt.latest(home / "data" / "base_model").state()["metrics"]
    figures = md["figures"]["base_model"]
    assert figures["val_loss"] == pytest.approx(trained["val_loss"], abs=1e-3)
    assert figures["val_bpb"] > 0 and figures["val_ppl"] > 1


def test_impossible_plan_is_refused_with_the_fix(data_home):
    home, corpus = data_home
    # 8B parameters (the 1b preset, 200 layers deep): their weights, gradients and AdamW
    # moments alone are far beyond this machine's memory; a batch of 2 windows of 1,024
    # tokens, which the validation split can fill (a larger one is refused before launch)
    result = _materialize(home, corpus, {**OVERRIDES, "model": "1b", "model.n_layers": 200, "train.batch_size": 2,
                                         "train.seq_len": 1024})
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    text = failure.message + "".join(c.message for c in [failure.cause] if c)
    assert "refused by the preflight plan" in text and "DOES NOT FIT" in text and "fixes:" in text


CANCEL_SCRIPT = textwrap.dedent("""
    import sys
    from assets.definitions import build_resources
    from orchestration.runner import materialize_one
    home, corpus, overrides = sys.argv[1:4]
    resources = build_resources(home=home, corpus=corpus, preset="tiny", overrides=overrides)
    print(materialize_one(["base_model"], [], resources).error)
""")


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            out.add(k)
            todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cancelling_the_run_ends_the_torchrun_tree(data_home, tmp_path):
    home, corpus = data_home
    long = {**OVERRIDES, "train.steps": 100_000, "train.checkpoint_every": 100_000, "train.eval_every": 100_000}
    script = tmp_path / "run.py"
    script.write_text(CANCEL_SCRIPT)
    environ = {**os.environ, "YUNQUE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    proc = subprocess.Popen([sys.executable, str(script), str(home), str(corpus), json.dumps(long)], env=environ,
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = home / "data" / "base_model" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    tree: set[int] = set()
    try:
        while time.monotonic() < deadline:  # until training steps are being logged
            if metrics.exists() and '"event": "step"' in metrics.read_text() and \
                    any("model.pretrain.train" in Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")
                        for p in _descendants(proc.pid) if _alive(p)):
                break
            assert proc.poll() is None, "the run ended before training started"
            time.sleep(0.2)
        else:
            pytest.fail("training never started")
        tree = _descendants(proc.pid)  # supervisor, torchrun, the worker
        assert len(tree) >= 3
        # Dagster's run termination reaches the run worker as SIGINT (dagster api execute_run
        # interrupts itself); an in-process materialize() handles it the same way.
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], "processes outlived the cancelled run"
    finally:
        for p in [proc.pid, *tree]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    instance = dg.DagsterInstance.get()
    last = instance.get_runs(limit=1)[0]
    # an in-process run that is interrupted ends FAILURE (a run terminated from the UI ends
    # CANCELED: test_operate), with our step failure that is never retried
    assert last.status == dg.DagsterRunStatus.FAILURE
    events = [e.dagster_event for e in instance.all_logs(last.run_id) if e.dagster_event]
    failures = [e.step_failure_data.error for e in events if e.is_step_failure]
    assert len(failures) == 1 and "base_model: cancelled; the training process tree was stopped" in (
        failures[0].message + "".join(c.message for c in [failures[0].cause] if c)), failures
    assert not any(e.is_step_up_for_retry for e in events), "a cancelled training is never retried"
    client = _mlflow(home)
    exp = client.get_experiment_by_name("yunque")
    newest = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
    assert newest.info.status == "KILLED"
    assert instance.event_log_storage.get_concurrency_info("training").claimed_slots == []  # the pool is free
