"""What one event costs in an event log storage, for `bench/bench_event_store.py` (which
may not import Dagster): a materialization stored, as a batch step stores one per shard
and asset, and the latest materialization's id looked up, as the step does for each
shard's provenance and check target."""

from __future__ import annotations

import tempfile
import time
import uuid

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.base import EventLogStorage


def storages(postgres_url: str | None = None, pgbouncer_url: str | None = None) -> dict[str, EventLogStorage]:
    """Dagster's sqlite event log and ours, each in a new folder; Dagster's Postgres event
    log at each URL given."""
    from dagster._core.storage.event_log import SqliteEventLogStorage

    from resources.sqlite_storage import PooledSqliteEventLogStorage

    out: dict[str, EventLogStorage] = {
        "dagster_sqlite": SqliteEventLogStorage(tempfile.mkdtemp(prefix="evl-dagster-")),
        "pooled_sqlite": PooledSqliteEventLogStorage(tempfile.mkdtemp(prefix="evl-pooled-"))}
    for name, url in (("postgres", postgres_url), ("pgbouncer", pgbouncer_url)):
        if url:
            from dagster_postgres import PostgresEventLogStorage

            out[name] = PostgresEventLogStorage(url)
    return out


def _materialization(run_id: str, i: int) -> EventLogEntry:
    m = dg.AssetMaterialization(asset_key="pages", partition=f"s{i:05d}", metadata={"rows": i, "bytes": 1000 * i})
    return EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id, timestamp=time.time(),
                         step_key="pages", job_name="bench",
                         dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "bench",
                                                    step_key="pages", event_specific_data=StepMaterializationData(m)))


def store_then_look_up(storage: EventLogStorage, n: int) -> tuple[float, float]:
    """Seconds to store `n` materializations of a new run (their building off the clock),
    then to look up each one's partition's latest materialization id."""
    run_id = str(uuid.uuid4())
    events = [_materialization(run_id, i) for i in range(n)]
    t0 = time.perf_counter()
    for e in events:
        storage.store_event(e)
    stored = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(n):
        storage.get_latest_storage_id_by_partition(dg.AssetKey("pages"), DagsterEventType.ASSET_MATERIALIZATION,
                                                   {f"s{i:05d}"})
    return stored, time.perf_counter() - t1
