"""Batches through the path users run: a backfill of 40 shards launched through the
webserver's GraphQL API (what the UI's "Materialize" sends) with 8 shards per run makes at
most 5 runs per per-shard phase, gives every partition its own materialization, and
produces what one run per shard produces; `yunque run` of the data half leaves no run
behind that is not part of its backfill."""

from __future__ import annotations

import json
from collections import defaultdict

import dagster as dg
import pytest

from tests.support.cli import home_outputs, run_cli
from tests.support.factory import SMALL_RUN, add_shard
from tests.support.fault_runs import instance_of
from tests.support.ui_server import LAUNCH, graphql, ui, wait_for
from yunque import env

N, PER_RUN = 40, 8
# quality_model too: deduped_documents refuses a shard the learned model has not scored, and
# leaving it to the automation sensor races the backfill (on a slow machine, the sensor lost)
DATA_HALF = ["raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "dedup_index",
             "quality_model", "deduped_documents", "tokenizer", "token_shards"]
PER_SHARD = {"raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "deduped_documents",
             "token_shards"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("forty") / "corpus"
    for i in range(N):
        add_shard(root, f"s{i:02d}", seed=i, docs=2)
    return root


def run_errors(instance: dg.DagsterInstance, runs: list) -> list[str]:
    """What each failed run says went wrong, so a failure in CI names its cause."""
    out = []
    for r in runs:
        if r.status == dg.DagsterRunStatus.SUCCESS:
            continue
        for e in instance.all_logs(r.run_id):
            if e.dagster_event and e.dagster_event.is_failure:
                err = getattr(e.dagster_event.event_specific_data, "error", None)
                out.append(f"{r.run_id[:8]} {e.step_key}: {err.message.strip() if err else e.message}")
        out.append(f"{r.run_id[:8]} {r.status.value}")
    return out


def test_forty_shards_in_batches_of_eight_through_the_ui(corpus, tmp_path, monkeypatch):
    from stages.store import home as home_settings

    home = tmp_path / "home"
    home_settings.write(home, home_settings.HomeSettings(corpus=str(corpus), overrides=json.loads(SMALL_RUN)))
    with ui(home, YUNQUE_SHARDS_PER_RUN=str(PER_RUN)) as url:
        instance = instance_of(home)
        wait_for("the shard sensor to register the shards",
                 lambda: len(instance.get_dynamic_partitions("shards")) == N, 180)
        out = graphql(url, LAUNCH, {"p": {"assetSelection": [{"path": [k]} for k in DATA_HALF],
                                          "allPartitions": True, "title": "forty shards"}})["launchPartitionBackfill"]
        assert out["__typename"] == "LaunchBackfillSuccess", out
        backfill = out["backfillId"]
        status = wait_for("the backfill to end", lambda: (b := instance.get_backfill(backfill)).status.value
                          not in ("REQUESTED", "CANCELING", "FAILING") and b.status.value, 900)
    runs = [r for r in instance.get_runs() if r.tags.get("dagster/backfill") == backfill]
    assert status == "COMPLETED_SUCCESS", run_errors(instance, runs)
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    phases: dict[frozenset, int] = defaultdict(int)
    for r in runs:
        phases[frozenset(k.to_user_string() for k in r.asset_selection)] += 1
    per_shard = {p: n for p, n in phases.items() if p & PER_SHARD}
    assert len(per_shard) == 3, phases  # read..sign, deduped, token arrays
    assert all(n <= N // PER_RUN for n in per_shard.values()), per_shard
    # every partition its own materialization, in the instance the UI reads
    for asset in PER_SHARD:
        done = instance.get_materialized_partitions(dg.AssetKey(asset))
        assert done == {f"s{i:02d}" for i in range(N)}, asset

    # one shard per run (in this process, each shard its own Dagster run) gives the same outputs
    from orchestration.runner import run_graph

    single = tmp_path / "single"
    monkeypatch.setenv("YUNQUE_HOME", str(single))
    monkeypatch.setenv("DAGSTER_HOME", str(single / "dagster"))
    env.use_home(single)
    summary = run_graph(str(corpus), select="*token_shards", overrides=SMALL_RUN, shards_per_run=1)
    assert summary.ok, [r.error for r in summary.runs if not r.ok]
    assert sum(1 for r in summary.runs if r.shards) == 3 * N
    assert home_outputs(single) == home_outputs(home)


def test_data_half_run_leaves_no_run_outside_its_backfill(corpus, tmp_path):
    home = tmp_path / "home"
    small = corpus.parent / "small"
    for name in ("s00", "s01", "s02"):
        (small / name).mkdir(parents=True)
        for f in (corpus / name).iterdir():
            (small / name / f.name).write_bytes(f.read_bytes())
    done = run_cli(home, small, "*deduped_documents")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    instance = instance_of(home)
    runs = instance.get_runs()
    assert {r.tags.get("dagster/backfill") for r in runs} == {runs[0].tags["dagster/backfill"]}, \
        [(r.job_name, r.asset_selection, r.status) for r in runs]
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    assert not instance.get_materialized_partitions(dg.AssetKey("token_shards"))
    assert "3 shards: s00 .. s02" in done.stdout  # one batch: the summary line names its range


def test_a_failed_shard_fails_alone_under_the_daemon(corpus, tmp_path):
    """Through `yunque run` and the daemon: the batch's other shards are materialized, the
    backfill counts only the failed shard as failed, and the CLI names it."""
    home = tmp_path / "home"
    small = corpus.parent / "trio"
    for name in ("s00", "s01", "s02"):
        (small / name).mkdir(parents=True, exist_ok=True)
        for f in (corpus / name).iterdir():
            (small / name / f.name).write_bytes(f.read_bytes())
    first = run_cli(home, small, "key:raw_documents")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    (home / "data" / "raw_documents" / "s01" / "part-0.parquet").write_bytes(b"not a parquet file")
    second = run_cli(home, small, "key:clean_documents")
    assert second.returncode == 1
    assert "1 of 3 shards failed (s01:" in second.stdout + second.stderr
    instance = instance_of(home)
    backfill = instance.get_backfills()[0]  # the newest
    data = backfill.asset_backfill_data
    clean = dg.AssetKey("clean_documents")
    assert set(data.materialized_subset.get_partitions_subset(clean).get_partition_keys()) == {"s00", "s02"}
    assert set(data.failed_and_downstream_subset.get_partitions_subset(clean).get_partition_keys()) == {"s01"}
    assert instance.get_materialized_partitions(clean) == {"s00", "s02"}
