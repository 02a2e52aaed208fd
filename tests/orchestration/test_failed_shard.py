"""A batch in which one shard fails, through the path users run: `yunque run` names the
shard and its cause, the run's error names it, and the UI's partition view (the
webserver's GraphQL, what the asset's Partitions tab asks) shows that shard failed and
the others of its batch materialized."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import dagster as dg

from tests.support import REPO
from tests.support.cli import run_cli
from tests.support.factory import add_shard
from tests.support.fault_runs import instance_of
from tests.support.ui_server import free_port, graphql, ui_env

SHARDS = ["uno", "dos", "tres", "cuatro"]
STATUSES = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions
    materializingPartitions } } } } }"""


def _webserver(home):
    """Dagster's webserver alone on the home (no daemon: nothing may run meanwhile)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                             "-w", str(REPO / "workspace.yaml")], cwd=REPO, env=ui_env(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return proc, f"http://127.0.0.1:{port}/graphql"
        except OSError:
            assert proc.poll() is None and time.time() < deadline, "the webserver did not answer"
            time.sleep(1)


def test_a_failed_shard_of_a_batch_is_failed_in_the_cli_the_run_and_the_ui(tmp_path):
    corpus, home = tmp_path / "corpus", tmp_path / "home"
    for i, name in enumerate(SHARDS):
        add_shard(corpus, name, seed=i)
    read = run_cli(home, corpus, "key:raw_documents")
    assert read.returncode == 0, read.stdout + read.stderr
    # the input of "tres"'s next stage is damaged on disk (its cache key still matches)
    (home / "data" / "raw_documents" / "tres" / "part-0.parquet").write_bytes(b"not a parquet file")

    done = run_cli(home, corpus, "key:clean_documents")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "1 of 4 shards failed (tres:" in out, out
    instance = instance_of(home)
    runs = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
    assert len(runs) == 1, "the four shards were one batch"
    failure = next(e for e in instance.all_logs(runs[0].run_id) if e.dagster_event and e.dagster_event.is_step_failure)
    assert "tres" in failure.dagster_event.step_failure_data.error.message

    proc, url = _webserver(home)
    try:
        statuses = graphql(url, STATUSES, {"key": {"path": ["clean_documents"]}})
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    parts = statuses["assetNodeOrError"]["assetPartitionStatuses"]
    assert parts["failedPartitions"] == ["tres"], json.dumps(parts)
    assert sorted(parts["materializedPartitions"]) == sorted(set(SHARDS) - {"tres"})
    assert parts["materializingPartitions"] == []
