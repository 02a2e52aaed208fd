"""Operating Yunque from Dagster, for real: `yunque run` submits a backfill to a daemon;
`yunque ui` starts a real webserver and daemon; a backfill launched through the
webserver's GraphQL API (what the UI's "Materialize" does) completes with the CLI's
outputs; opening the UI on a CLI-built home starts nothing; a new shard flows, with the
training schedule switched on, to a continued base model, the chain, the evaluation and
a promotion decision; so do ten ratings with the feedback sensor switched on; cancelling
a training run leaves none of its processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from tests.support.cli import home_outputs, run_cli
from tests.support.factory import SMALL_RUN, add_shard, write_two_shards
from tests.support.fault_runs import instance_of
from tests.support.ui_server import LAUNCH, REPO, YUNQUE, graphql, ui, ui_env, wait_for

DATA_HALF = "+key:token_shards"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("operate") / "corpus"
    write_two_shards(root)
    (root / "vacio").mkdir()  # a shard with nothing worth keeping: one line of English
    (root / "vacio" / "only.txt").write_text("Too short, and English.", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def cli_home(corpus, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("cli") / "home"
    done = run_cli(home, corpus, None)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (home.parent / "run.out").write_text(done.stdout)
    return home


def test_the_model_half_prints_each_asset_as_it_materializes(cli_home):
    """The model half is one run of a dozen assets: `yunque run` prints each one's line as
    it lands (the run's own line would name them all at its end)."""
    lines = (cli_home.parent / "run.out").read_text().splitlines()
    for asset, later in (("base_model", "sft_model"), ("sft_model", "dpo_model"), ("reward_model", "exported_model")):
        assert any(line.startswith(f"[corpus] {asset} ") and later not in line for line in lines), \
            f"no line of its own for {asset}:\n" + "\n".join(lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("[corpus] base_model "))
    assert first < next(i for i, line in enumerate(lines) if line.startswith("[corpus] sft_model "))


def test_cli_run_is_one_backfill_through_the_daemon(cli_home):
    instance = instance_of(cli_home)
    runs = instance.get_runs()
    backfills = {r.tags.get("dagster/backfill") for r in runs}
    assert len(backfills) == 1 and None not in backfills, "every run of `yunque run` belongs to its backfill"
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    # the empty shard is a success with zero rows, never a failure
    rows = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("deduped_documents"), asset_partitions=["vacio"]), limit=1)
    assert rows.records and rows.records[0].asset_materialization.metadata["dagster/row_count"].value == 0


def test_opening_the_ui_on_a_cli_home_starts_nothing(cli_home):
    instance = instance_of(cli_home)
    before = len(instance.get_runs())
    with ui(cli_home):
        def ticked() -> bool:  # both sensors have a state and have evaluated at least twice
            states = {s.instigator_name: s for s in instance.all_instigator_state()}
            return all(n in states and len(instance.get_ticks(states[n].instigator_origin_id, states[n].selector_id,
                                                             limit=5)) >= 2
                       for n in ("shard_sensor", "data_automation"))
        wait_for("two ticks of each sensor", ticked, 180)
    assert len(instance.get_runs()) == before, [r.job_name for r in instance.get_runs()[: len(instance.get_runs()) - before]]


def test_graphql_backfill_matches_the_cli(cli_home, corpus, tmp_path):
    home = tmp_path / "home"
    from stages.store import home as home_settings

    home_settings.write(home, home_settings.HomeSettings(corpus=str(corpus), overrides=json.loads(SMALL_RUN)))
    # quality_model too: deduped_documents refuses a shard the learned model has not scored
    # (left to the automation sensor, it races the backfill)
    keys = ["raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "dedup_index",
            "quality_model", "deduped_documents", "tokenizer", "token_shards"]
    with ui(home) as url:
        instance = instance_of(home)  # `yunque ui` has made it
        wait_for("the shard sensor to register the shards",
                 lambda: len(instance.get_dynamic_partitions("shards")) == 3, 120)
        out = graphql(url, LAUNCH, {"p": {"assetSelection": [{"path": [k]} for k in keys], "allPartitions": True,
                                          "title": "from the UI"}})["launchPartitionBackfill"]
        assert out["__typename"] == "LaunchBackfillSuccess", out
        backfill = out["backfillId"]
        status = wait_for("the backfill to end", lambda: (b := instance.get_backfill(backfill)).status.value
                          not in ("REQUESTED", "CANCELING", "FAILING") and b.status.value, 600)
    assert status == "COMPLETED_SUCCESS"
    failed = [r.run_id for r in instance.get_runs() if r.status != dg.DagsterRunStatus.SUCCESS]
    assert not failed, "no run fails: the shard sensor's runs and the backfill's share partitions safely"
    assert home_outputs(home) == home_outputs(cli_home)


START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
  __typename ... on ScheduleStateResult { scheduleState { status } } ... on PythonError { message } } }"""
TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) {
  __typename ... on TerminateRunFailure { message } ... on PythonError { message } } }"""
LOCATION = {"repositoryLocationName": "assets.definitions", "repositoryName": "__repository__"}


def _finished(instance: dg.DagsterInstance, job: str) -> dg.DagsterRun | None:
    """The newest run of `job`, once it has finished."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=job))
    return runs[0] if runs and runs[0].is_finished else None


def _record(home: Path, asset: str) -> dict:
    return json.loads((home / "data" / asset / "materialized.json").read_text())


def test_new_shard_reaches_a_promoted_model(cli_home, corpus):
    """The UI's switch turns training on; a shard dropped into the corpus is read, deduplicated
    and encoded by the data automation, then the schedule's tick continues pretraining from
    the last base checkpoint, runs the chain and the evaluation, and decides on promotion."""
    instance = instance_of(cli_home)
    before = _record(cli_home, "base_model")
    add_shard(corpus, "nuevo", docs=4)
    with ui(cli_home, YUNQUE_TRAINING_CRON="* * * * *") as url:
        out = graphql(url, START_SCHEDULE, {"s": {**LOCATION, "scheduleName": "train_on_new_data"}})
        assert out["startSchedule"]["__typename"] == "ScheduleStateResult", out

        run = wait_for("a train_and_promote run started by the schedule to finish",
                       lambda: _finished(instance, "train_and_promote"), 900, poll=5)
    assert run.status == dg.DagsterRunStatus.SUCCESS, run.run_id
    assert run.tags.get("dagster/schedule_name") == "train_on_new_data"
    # the new shard was encoded with the tokenizer as it was: never retrained by automation
    assert len(instance.fetch_materializations(dg.AssetKey("tokenizer"), limit=10).records) == 1
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in instance.get_runs() if r.is_finished)
    after = _record(cli_home, "base_model")
    assert after["step"] > before["step"], "continued from the last base checkpoint, not from scratch"
    # the promotion decision was made in that run, and promoted_model did what it said:
    # materialized (a version under the alias) when no_regression passed, skipped when not
    from dagster._core.events import DagsterEventType

    evaluations = [r.event_log_entry.dagster_event.asset_check_evaluation_data for r in instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
    decision = [e for e in evaluations if e.check_name == "no_regression"]
    assert len(decision) == 1, [e.check_name for e in evaluations]
    promoted = [r.event_log_entry.dagster_event.step_materialization_data.materialization for r in
                instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
                if r.event_log_entry.dagster_event.asset_key == dg.AssetKey("promoted_model")]
    assert bool(promoted) == decision[0].passed, (decision[0].passed, promoted)
    if promoted:
        md = promoted[0].metadata
        assert md["alias"].value == "champion" and md["version"].value, md
    lineage = subprocess.run([YUNQUE, "--home", str(cli_home), "lineage", str(cli_home / "data" / "exported_model"),
                              "--json"], capture_output=True, text=True, env=ui_env(cli_home), check=True)
    assert "nuevo" in lineage.stdout


def _tree(marker: str) -> list[int]:
    """Processes whose command line names `marker` (the training run's config path)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def test_cancelling_a_training_run_under_the_daemon_leaves_no_process(cli_home, corpus, tmp_path):
    """Terminate, as the UI's button does, a training run that the daemon launched: the
    whole torchrun tree (supervisor, agent, workers) is gone afterwards."""
    overrides = {**json.loads(SMALL_RUN), "train.steps": 100_000, "train.continue_from_previous": False}
    cmd = [YUNQUE, "--home", str(cli_home), "run", "--corpus", str(corpus), "--select", "key:base_model",
           "--overrides", json.dumps(overrides)]
    marker = str(cli_home / "data" / "base_model" / "train_config.json")
    with ui(cli_home) as url, open(tmp_path / "cli.log", "w") as log:
        cli = subprocess.Popen(cmd, cwd=REPO, env=ui_env(cli_home), stdout=log, stderr=subprocess.STDOUT)
        instance = instance_of(cli_home)
        metrics = cli_home / "data" / "base_model" / "metrics.jsonl"

        def training():
            running = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
            steps = metrics.exists() and '"event": "step"' in metrics.read_text()
            return running and steps and _tree(marker) and running[0]
        run = wait_for("the training to take steps", training, 300)
        out = graphql(url, TERMINATE, {"id": run.run_id})["terminateRun"]
        assert out["__typename"] == "TerminateRunSuccess", out
        wait_for("the training processes to end", lambda: not _tree(marker), 90)
        assert cli.wait(timeout=120) != 0
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED


def test_a_training_retry_says_why_and_where_it_resumed(cli_home, corpus, tmp_path):
    """A training worker killed after a checkpoint: the asset's retry policy runs it again,
    and `yunque run` says so in one line (why), then where the new attempt resumed."""
    overrides = {**json.loads(SMALL_RUN), "train.steps": 400, "train.checkpoint_every": 5,
                 "train.continue_from_previous": False}
    cmd = [YUNQUE, "--home", str(cli_home), "run", "--corpus", str(corpus), "--select", "key:base_model",
           "--overrides", json.dumps(overrides)]
    marker = str(cli_home / "data" / "base_model" / "train_config.json")
    metrics = cli_home / "data" / "base_model" / "metrics.jsonl"
    start = metrics.stat().st_size if metrics.exists() else 0
    with open(tmp_path / "cli.log", "w") as log:
        cli = subprocess.Popen(cmd, cwd=REPO, env=ui_env(cli_home), stdout=log, stderr=subprocess.STDOUT)
        try:
            def checkpointed():
                text = metrics.read_bytes()[start:].decode(errors="replace") if metrics.exists() else ""
                return '"event": "checkpoint"' in text and _workers(marker)
            worker = wait_for("a checkpoint of the new training", checkpointed, 300, poll=0.5)[0]
            os.kill(worker, signal.SIGKILL)
            # the checkpoints written before the kill (a new best is saved at its step too)
            lines = metrics.read_bytes()[start:].decode(errors="replace").splitlines()
            saved = max(int(m.group(1)) for line in lines if '"event": "checkpoint"' in line
                        and (m := re.search(r'"step": (\d+)', line)))
            assert cli.wait(timeout=600) == 0, (tmp_path / "cli.log").read_text()
        finally:
            if cli.poll() is None:
                cli.kill()
    out = (tmp_path / "cli.log").read_text()
    assert "[base_model] failed, retrying (attempt 2): " in out, out
    resumed = next(line for line in out.splitlines() if line.startswith("[base_model] attempt 2: "))
    assert "resumed from step " in resumed and "(checkpoint " in resumed, resumed
    assert int(resumed.split("resumed from step ")[1].split()[0]) >= saved > 0


def _workers(marker: str) -> list[int]:
    """The training worker processes (not the supervisor, nor torchrun's agent)."""
    agents = ("model.launch.supervise", "torch.distributed.run", "model.launch.torchrun_local")
    found = []
    for pid in _tree(marker):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if not any(a in line for a in agents):
            found.append(pid)
    return found


START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
  __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""


def test_ratings_reach_the_promotion_check_through_the_feedback_sensor(cli_home):
    """The chat page's ratings (appended as `yunque serve` appends them) and the UI's switch
    for feedback_sensor: the daemon's tick runs align_on_feedback, which reads the ratings
    into human_preferences, retrains the alignment chain on them and decides on promotion."""
    from pipelines.feedback.records import FeedbackLog

    log = FeedbackLog(cli_home / "feedback")
    for i in range(10):  # feedback.min_new_ratings
        log.append({"id": f"r{i}", "kind": "compare", "choice": "a", "edited": "Son 5." if i % 3 == 0 else None,
                    "messages": [{"role": "user", "content": f"¿Cuánto es {i} más 5?"}],
                    "answers": [{"model": "champion", "version": "1", "weights_sha256": "a" * 64, "text": f"{i + 5}"},
                                {"model": "v0", "version": "0", "weights_sha256": "b" * 64, "text": "no sé"}]})
    instance = instance_of(cli_home)
    with ui(cli_home) as url:
        out = graphql(url, START_SENSOR, {"s": {**LOCATION, "sensorName": "feedback_sensor"}})
        assert out["startSensor"]["__typename"] == "Sensor", out

        run = wait_for("an align_on_feedback run started by the sensor to finish",
                       lambda: _finished(instance, "align_on_feedback"), 900, poll=5)
    assert run.status == dg.DagsterRunStatus.SUCCESS, run.run_id
    assert run.tags.get("dagster/sensor_name") == "feedback_sensor" and run.tags["yunque/new_ratings"] == "10"
    md = instance.fetch_materializations(dg.AssetKey("human_preferences"), limit=1).records[0]
    assert md.run_id == run.run_id and md.asset_materialization.metadata["ratings"].value == 10
    version = md.asset_materialization.metadata["feedback_version"].value
    for asset in ("sft_model", "reward_model", "dpo_model"):
        assert _record(cli_home, asset)["inputs"]["human_preferences"]["version"] == version, asset
    from dagster._core.events import DagsterEventType

    checks = [r.event_log_entry.dagster_event.asset_check_evaluation_data.check_name for r in
              instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
    assert "no_regression" in checks  # the promotion gate decided
