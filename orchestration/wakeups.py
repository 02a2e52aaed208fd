"""Our daemon's loops wake on news, not only on their clock. Dagster's backfill loop sleeps
out its interval (5 s in ours) whatever happens, so a backfill advanced one dependency level
per interval: 2.5 s idle on average per level, and as long again before the backfill was
marked done; the run queue is read every second, so a queued run waited 0.5 s on average
to start (measured at 24 shards). Here each loop's wait ends early when the run storage
shows what gives it work, looked for every WAKE_POLL_S in two small indexed queries:

- the backfill loop: a run ended, or a backfill was submitted, cancelled or failing;
- the queue: a run ended (a slot is free) or a run was queued.

A run's start is no news: at 1,000 shards a backfill iteration costs a few tenths of a
second of CPU, which every start would add. It replaces the two daemons' `core_loop`s
(Dagster 1.13.27, pinned). docs/operations.md#the-daemon.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

import dagster as dg
import sqlalchemy as db
from dagster._core.storage.dagster_run import FINISHED_STATUSES
from dagster._core.storage.runs.schema import BulkActionsTable, RunsTable
from sqlalchemy.engine import Connection

WAKE_POLL_S = 0.25
UNFINISHED_BACKFILLS = ["REQUESTED", "CANCELING", "FAILING"]


def _last_end(conn: Connection):
    return conn.execute(db.select(db.func.max(RunsTable.c.update_timestamp)).where(
        RunsTable.c.status.in_([s.value for s in FINISHED_STATUSES]))).scalar()


def backfill_news(conn: Connection) -> tuple:
    """The latest end of a run, and the unfinished backfills with their statuses (not
    `get_backfills`, which deserializes each backfill's partition subsets: at 1,000 shards
    that poll was half of the daemon's CPU)."""
    active = conn.execute(db.select(BulkActionsTable.c.id, BulkActionsTable.c.status).where(
        BulkActionsTable.c.status.in_(UNFINISHED_BACKFILLS))).all()
    return _last_end(conn), sorted(tuple(row) for row in active)


def queue_news(conn: Connection) -> tuple:
    """The latest end of a run, and the queued runs (how many, the newest)."""
    queued = conn.execute(db.select(db.func.count(), db.func.max(RunsTable.c.create_timestamp)).where(
        RunsTable.c.status == dg.DagsterRunStatus.QUEUED.value)).one()
    return _last_end(conn), tuple(queued)


class WakingEvent:
    """A daemon's shutdown event as its loop waits on it: `wait(timeout)` also returns
    (False) as soon as `news` reads differently from the run storage than it did when the
    wait began."""

    def __init__(self, shutdown: threading.Event, instance: dg.DagsterInstance,
                 news: Callable[[Connection], tuple]):
        self._shutdown, self._instance, self._news = shutdown, instance, news

    def is_set(self) -> bool:
        return self._shutdown.is_set()

    def _read(self) -> tuple:
        with self._instance.run_storage.connect() as conn:  # type: ignore[attr-defined]
            return self._news(conn)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or 0)
        try:
            seen = self._read()
        except Exception:  # noqa: BLE001 (a storage hiccup: sleep the interval out as Dagster would)
            return self._shutdown.wait(timeout)
        while (left := deadline - time.monotonic()) > 0:
            if self._shutdown.wait(min(WAKE_POLL_S, left)):
                return True
            try:
                if self._read() != seen:
                    return False
            except Exception:  # noqa: BLE001, S112 (a storage hiccup: look again next poll)
                continue
        return self._shutdown.is_set()


def _backfill_loop(self, workspace_process_context, shutdown_event) -> Iterator:  # type: ignore[no-untyped-def]
    from dagster._daemon.backfill import execute_backfill_iteration_loop

    yield from execute_backfill_iteration_loop(
        workspace_process_context, self._logger, WakingEvent(shutdown_event, workspace_process_context.instance,
                                                             backfill_news),
        threadpool_executor=self._threadpool_executor, submit_threadpool_executor=self._submit_threadpool_executor)


def _queue_loop(self, workspace_process_context, shutdown_event) -> Iterator:  # type: ignore[no-untyped-def]
    """Dagster's `IntervalDaemon.core_loop`, its wait a `WakingEvent`'s."""
    from dagster._daemon.daemon import SpanMarker
    from dagster._utils.error import serializable_error_info_from_exc_info

    waking = WakingEvent(shutdown_event, workspace_process_context.instance, queue_news)
    while True:
        start = time.time()
        yield SpanMarker.START_SPAN
        try:
            yield from self.run_iteration(workspace_process_context)
        except Exception:  # noqa: BLE001 (as Dagster's loop: logged, and the loop goes on)
            error_info = serializable_error_info_from_exc_info(sys.exc_info())
            self._logger.error("Caught error:\n%s", error_info)
            yield error_info
        yield SpanMarker.END_SPAN
        waking.wait(max(0.0, self.interval_seconds - (time.time() - start)))
        yield None


def install() -> None:
    """Give this process' backfill and queue daemons the loops above."""
    from dagster._daemon.daemon import BackfillDaemon
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
        QueuedRunCoordinatorDaemon,
    )

    BackfillDaemon.core_loop = _backfill_loop  # type: ignore[method-assign]
    QueuedRunCoordinatorDaemon.core_loop = _queue_loop  # type: ignore[method-assign]
