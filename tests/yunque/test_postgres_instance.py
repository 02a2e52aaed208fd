"""The Postgres instance profile (deploy/postgres/dagster.yaml), against a real PostgreSQL
server: YUNQUE_DAGSTER_POSTGRES_URL selects it, Dagster loads it as a Postgres instance
with the queued coordinator and the laptop's limits, and `yunque run`'s backfill, planned
by the daemon, leaves its runs and materializations in Postgres tables. A hand-edited
dagster.yaml is left alone with a warning; a Postgres home without the variable fails
in words."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import psycopg2
import pytest

from tests.support import REPO
from tests.support.factory import SMALL_RUN, write_two_shards
from tests.yunque.pg_server import dagster_url, new_database
from yunque import env

YUNQUE = str(Path(sys.executable).with_name("yunque"))
FAST = {"YUNQUE_SENSOR_INTERVAL": "5", "YUNQUE_AUTOMATION_INTERVAL": "5", "YUNQUE_DAEMON_INTERVAL": "3"}
SELECT = "+key:clean_documents"  # raw_documents then clean_documents: two levels the daemon plans


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """use_home writes YUNQUE_HOME and DAGSTER_HOME into os.environ: registered here so
    that they are restored after the test, and no YUNQUE_DAGSTER_POSTGRES_URL leaks in."""
    for name in ("YUNQUE_HOME", "DAGSTER_HOME"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.delenv(env.POSTGRES_URL, raising=False)
    return monkeypatch


def _query(url: str, sql: str) -> list[tuple]:
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def test_profile_is_a_postgres_instance_with_the_run_limits(postgres_url, tmp_path, isolated):
    url = new_database(postgres_url, "profile")
    env.use_home(tmp_path / "home")  # a laptop home first: our sqlite file
    target = tmp_path / "home" / "dagster" / "dagster.yaml"
    assert target.read_text() == env.SQLITE_PROFILE.read_text()
    isolated.setenv(env.POSTGRES_URL, dagster_url(url))
    env.use_home(tmp_path / "home")
    assert target.read_text() == env.POSTGRES_PROFILE.read_text()
    assert "yunque-test-pw" not in target.read_text(), "the URL stays in the environment"
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        limits = instance.get_concurrency_config()
        assert limits.run_queue_config.max_concurrent_runs == 2
        assert limits.pool_config.default_pool_limit == 1
        assert not instance.telemetry_enabled and instance.run_monitoring_enabled
        assert instance.root_directory == str(tmp_path / "home" / "dagster"), "logs stay in the home"
    tables = {t for (t,) in _query(url, "SELECT tablename FROM pg_tables WHERE tableowner = 'yunque'")}
    assert {"runs", "event_logs", "bulk_actions", "daemon_heartbeats"} <= tables


def test_hand_edited_file_is_left_alone_with_a_warning(tmp_path, isolated, capsys):
    target = tmp_path / "home" / "dagster" / "dagster.yaml"
    target.parent.mkdir(parents=True)
    mine = env.SQLITE_PROFILE.read_text() + "\n# my own retention settings\n"
    target.write_text(mine)
    isolated.setenv(env.POSTGRES_URL, "postgresql+psycopg2://u:p@127.0.0.1:1/db")  # never connected to
    env.use_home(tmp_path / "home")
    assert target.read_text() == mine
    warning = capsys.readouterr().err.strip()
    assert str(target) in warning and env.POSTGRES_URL in warning and "\n" not in warning


def test_postgres_home_without_the_variable_fails_in_words(tmp_path, isolated):
    isolated.setenv(env.POSTGRES_URL, "postgresql+psycopg2://u:p@127.0.0.1:1/db")
    env.use_home(tmp_path / "home")
    isolated.delenv(env.POSTGRES_URL)
    with pytest.raises(SystemExit) as e:
        env.use_home(tmp_path / "home")
    assert env.POSTGRES_URL in str(e.value) and str(tmp_path / "home" / "dagster" / "dagster.yaml") in str(e.value)

    # a URL no installed driver opens is refused before Dagster imports one
    isolated.setenv(env.POSTGRES_URL, "postgres://u:p@127.0.0.1:1/db")
    with pytest.raises(SystemExit, match=r"write postgresql://user"):
        env.use_home(tmp_path / "home")


def test_cli_backfill_lands_in_postgres(postgres_url, tmp_path):
    """The real path: `yunque run` registers the shards and submits the backfill to the
    Postgres instance, its own daemon plans and launches the runs; all of it is in the
    server's tables, nothing in sqlite."""
    url = new_database(postgres_url, "cli_run")
    write_two_shards(tmp_path / "corpus")
    home = tmp_path / "home"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("YUNQUE_", "DAGSTER_HOME"))}
    child_env |= {**FAST, "YUNQUE_HOME": str(home), env.POSTGRES_URL: dagster_url(url)}
    done = subprocess.run([YUNQUE, "--home", str(home), "run", "--corpus", str(tmp_path / "corpus"),
                           "--overrides", SMALL_RUN, "--select", SELECT], cwd=REPO, env=child_env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    runs = _query(url, "SELECT status, count(*) FROM runs GROUP BY status")
    assert runs == [("SUCCESS", 1)], runs  # both shards in one batch
    materialized = set(_query(url, "SELECT asset_key, partition FROM event_logs "
                                   "WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"))
    assert materialized == {(f'["{a}"]', s) for a in ("raw_documents", "clean_documents")
                            for s in ("manuales", "foro")}
    assert _query(url, "SELECT status FROM bulk_actions") == [("COMPLETED_SUCCESS",)]
    # the daemon `yunque run` started beat in Postgres, and took its heartbeats with it when
    # it stopped: a stale one would pass for a live daemon to the next `yunque run`
    assert _query(url, "SELECT daemon_type FROM daemon_heartbeats") == []
    assert not (home / "dagster" / "history").exists(), "no sqlite run storage beside the Postgres one"
