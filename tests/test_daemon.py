"""The unattended path, for real: a Dagster daemon on a temporary home watches a corpus
folder; the shard sensor registers shards and launches runs, the automation sensor then
builds dedup_index, deduped_documents, the tokenizer (once) and token_shards; a shard added
later flows through the same way and is encoded with the existing tokenizer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.factory import SMALL_RUN, add_shard, write_two_shards
from yunque import env

REPO = Path(__file__).resolve().parents[1]


def _materialized(instance: dg.DagsterInstance, key: str) -> set[str]:
    return {r.partition_key or "-" for r in instance.fetch_materializations(dg.AssetKey(key), limit=100).records}


def _wait(instance, key: str, want: set[str], deadline: float, proc: subprocess.Popen) -> None:
    while time.time() < deadline:
        if want <= _materialized(instance, key):
            return
        assert proc.poll() is None, "dagster-daemon exited"
        time.sleep(2)
    pytest.fail(f"{key} never materialized for {want}; have {_materialized(instance, key)}")


def test_daemon_sensor_and_automation(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored afterwards
    home = env.use_home(tmp_path / "home")
    daemon_env = {**os.environ, "YUNQUE_HOME": str(home), "YUNQUE_CORPUS": str(corpus),
                  "YUNQUE_SENSOR_INTERVAL": "5", "YUNQUE_AUTOMATION_INTERVAL": "5",
                  "DAGSTER_HOME": str(home / "dagster"), "YUNQUE_OVERRIDES": SMALL_RUN}
    daemon = Path(sys.executable).with_name("dagster-daemon")
    with open(tmp_path / "daemon.log", "w") as log:
        proc = subprocess.Popen([str(daemon), "run", "-w", "workspace.yaml"], cwd=REPO, env=daemon_env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        instance = dg.DagsterInstance.get()
        deadline = time.time() + 300
        _wait(instance, "token_shards", {"foro", "manuales"}, deadline, proc)
        assert _materialized(instance, "dedup_index") == {"-"}
        add_shard(corpus, "nuevo")
        _wait(instance, "token_shards", {"foro", "manuales", "nuevo"}, time.time() + 300, proc)
        assert len(instance.fetch_materializations(dg.AssetKey("tokenizer"), limit=10).records) == 1
        runs = instance.get_runs()
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs if r.is_finished)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
