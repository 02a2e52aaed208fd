"""The embedded instance's event log (resources/sqlite_storage.py) under the Dagster
behaviours the project uses: an instance from our dagster.yaml, in Dagster's file layout;
two processes storing a run's events at once; reading them back by run and by asset
partition; watching a run's events as the UI does; deleting a run with its events; a
wipe; and a Dagster release other than the one its internals were read from."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry

from resources import sqlite_storage
from yunque import env

PER_WRITER = 60


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("YUNQUE_HOME", "DAGSTER_HOME"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.delenv(env.POSTGRES_URL, raising=False)
    env.use_home(tmp_path / "home")
    return tmp_path / "home" / "dagster"


def _materialization(run_id: str, writer: str, i: int) -> EventLogEntry:
    m = dg.AssetMaterialization(asset_key="pages", partition=f"{writer}-{i:03d}", metadata={"i": i})
    return EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id, timestamp=time.time(),
                         step_key="pages", job_name="j",
                         dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "j", step_key="pages",
                                                    event_specific_data=StepMaterializationData(m)))


def _write(dagster_home: str, run_id: str, writer: str, start: multiprocessing.Event) -> None:
    os.environ["DAGSTER_HOME"] = dagster_home
    with dg.DagsterInstance.get() as instance:
        assert type(instance.event_log_storage).__name__ == "PooledSqliteEventLogStorage"
        start.wait(60)
        for i in range(PER_WRITER):
            instance.event_log_storage.store_event(_materialization(run_id, writer, i))


def test_the_instance_uses_it_in_dagsters_own_layout(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.event_log_storage, sqlite_storage.PooledSqliteEventLogStorage)
        assert type(instance.run_storage).__name__ == "SqliteRuns"
        assert type(instance.schedule_storage).__name__ == "SqliteSchedules"
        instance.add_dynamic_partitions("shards", ["a"])
    # the files `storage: sqlite:` gives: a home made before this storage reads as it was
    for db in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
        assert (home / db).exists(), db


def test_an_earlier_sqlite_profile_is_replaced_by_the_current_one(tmp_path: Path, home: Path) -> None:
    earlier = Path(__file__).with_name("dagster-d437fd1.yaml").read_text()  # `storage: sqlite:`
    (home / "dagster.yaml").write_text(earlier)
    env.use_home(tmp_path / "home")
    assert (home / "dagster.yaml").read_text() == env.SQLITE_PROFILE.read_text()


def test_two_processes_write_one_run_while_it_is_watched_then_it_is_deleted(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        run = instance.create_run_for_job(dg.GraphDefinition(name="g").to_job())
        seen: list[str] = []
        done = threading.Event()

        def watched(entry: EventLogEntry, _cursor: str) -> None:
            seen.append(entry.dagster_event.step_materialization_data.materialization.partition)
            if len(seen) == 2 * PER_WRITER:
                done.set()

        instance.event_log_storage.watch(run.run_id, None, watched)
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Event()
        writers = [ctx.Process(target=_write, args=(str(home), run.run_id, name, start)) for name in ("a", "b")]
        for w in writers:
            w.start()
        start.set()
        for w in writers:
            w.join(120)
            assert w.exitcode == 0
        # the watch fires on the run's files; our writers commit into its -wal file
        assert done.wait(30), f"the watch saw {len(seen)} of {2 * PER_WRITER} events"
        instance.event_log_storage.end_watch(run.run_id, watched)

        records = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
        wanted = {f"{w}-{i:03d}" for w in "ab" for i in range(PER_WRITER)}
        assert sorted(seen) == sorted(wanted) and len(records) == 2 * PER_WRITER
        assert len({r.storage_id for r in records}) == 2 * PER_WRITER
        key = dg.AssetKey("pages")
        assert instance.get_materialized_partitions(key) == wanted
        latest = instance.event_log_storage.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, wanted)
        assert set(latest) == wanted

        instance.delete_run(run.run_id)
        assert not instance.get_records_for_run(run.run_id).records
        assert instance.get_materialized_partitions(key) == set()
        assert instance.get_run_by_id(run.run_id) is None


def test_a_wipe_lets_go_of_its_connections(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        storage.store_event(_materialization("run-one", "a", 1))
        storage.wipe()
        assert not (home / "history" / "runs" / "run-one.db").exists()
        storage.store_event(_materialization("run-one", "a", 2))  # a new file, not the deleted one
        assert len(instance.get_records_for_run("run-one").records) == 1
        assert (home / "history" / "runs" / "run-one.db").exists()


def test_another_dagster_release_is_refused_in_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dg, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match=r"written against Dagster 1\.13\.27.*9\.9\.9 is installed"):
        sqlite_storage.PooledSqliteEventLogStorage(str(tmp_path / "events"))
