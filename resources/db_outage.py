"""Riding out a short outage of the Dagster database (PostgreSQL restarted or failed over).

dagster-postgres retries a failed connect for about eleven seconds, so a 20-second
restart of the server failed the runs in flight, the daemon's loops and `yunque run`.
Under our instance profile (`resources.pg_storage`, which every process that opens the
instance loads) a connect is retried with backoff until YUNQUE_OUTAGE_GRACE_S (60) have
passed since the first failure; past it the same exception ends the command in one line
(`yunque.faults`). Only connecting is retried: a query cut off mid-way still fails.
docs/troubleshooting.md#a-disk-a-store-or-the-database-fails.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
GRACE_ENV = "YUNQUE_OUTAGE_GRACE_S"
DEFAULT_GRACE_S = 60.0
MAX_WAIT_S = 5.0  # the longest pause between two tries

log = logging.getLogger("yunque.db_outage")


def grace_s() -> float:
    return float(os.environ.get(GRACE_ENV) or DEFAULT_GRACE_S)


def retry_connection(fn: Callable[[], T], retry_limit: int = 5, retry_wait: float = 0.2) -> T:
    """dagster_postgres.utils.retry_pg_connection_fn, bounded by time instead of tries
    (`retry_limit` is ignored; its callers pass none)."""
    import sqlalchemy.exc
    from dagster_postgres.utils import DagsterPostgresException

    grace = grace_s()
    deadline = None
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except (sqlalchemy.exc.DatabaseError, sqlalchemy.exc.OperationalError, sqlalchemy.exc.TimeoutError) as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + grace
                log.warning("the Dagster database does not answer (%s); retrying for up to %.0f s (%s)",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                            grace, GRACE_ENV)
            if now >= deadline:
                raise DagsterPostgresException(
                    f"too many retries for DB connection: the Dagster database did not answer for {grace:.0f} s "
                    f"({GRACE_ENV})") from exc
            time.sleep(min(deadline - now, retry_wait * 2 ** min(attempt, 5), MAX_WAIT_S))


def install() -> None:
    """Put `retry_connection` in place of dagster-postgres' own retry, in every module that
    calls it (the storages imported it by name). Idempotent."""
    from dagster_postgres import utils
    from dagster_postgres.event_log import event_log
    from dagster_postgres.run_storage import run_storage
    from dagster_postgres.schedule_storage import schedule_storage

    for module in (utils, event_log, run_storage, schedule_storage):
        module.retry_pg_connection_fn = retry_connection  # type: ignore[attr-defined]

