"""The embedded instance's storages: Dagster's sqlite storages in Dagster's own layout
under $DAGSTER_HOME, with one change to the event log. Dagster's opens a SQLAlchemy
engine for every read and write and disposes of it after (`NullPool`); the last close of
a WAL database then checkpoints it and fsyncs. The event log here keeps one pooled engine
per database file for the life of the process and writes with `synchronous=NORMAL` (in
WAL mode: a commit survives a crash of the process, and the last commits before a power
cut may be lost). Measured: docs/benchmarks.md#dagsters-bookkeeping-bench_orchestration-issue-44;
what it changes for an operator: docs/operations.md#the-embedded-instances-storage.

The run storage keeps its one connection the same way. Both override internals of
Dagster's sqlite storages (`_connect` and the watch of a run's events; `connect`):
`DAGSTER_VERSION` pins the release they were read from, and
tests/resources/test_sqlite_storage.py runs Dagster's behaviours against them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator

import dagster as dg
import sqlalchemy as db
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SqliteEventLogStorage,
    SqliteEventLogStorageWatchdog,
)
from dagster._core.storage.runs import SqliteRunStorage
from dagster._core.storage.schedules import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine

# The Dagster release whose SqliteEventLogStorage internals (`_connect`, `_initdb`,
# `_initialized_dbs`, `_db_lock`, the watchdog) this module was written against.
DAGSTER_VERSION = "1.13.27"
# Engines kept per process: the index and the run databases in use. A daemon or webserver
# touches every run's database over its life; the least recently used engine beyond this
# is disposed of.
ENGINES_KEPT = 32


def _check_version() -> None:
    if dg.__version__ != DAGSTER_VERSION:
        raise RuntimeError(
            f"resources.sqlite_storage was written against Dagster {DAGSTER_VERSION}'s sqlite event log internals, "
            f"and Dagster {dg.__version__} is installed: read dagster/_core/storage/event_log/sqlite/"
            "sqlite_event_log.py again and update it, or take the event_log_storage lines out of dagster.yaml")


# What a database's -wal file is cut back to after a checkpoint. With connections kept
# open the file outlives the writes (Dagster's own storage deletes it on the last close),
# at up to the 1,000 pages sqlite checkpoints at.
WAL_KEPT_BYTES = 1 << 20


def _normal_sync(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
    cursor.close()


class _Engines:
    """One pooled engine per database file, for this process: a forked child starts with
    none (a connection must not cross a fork)."""

    def __init__(self, limit: int = ENGINES_KEPT):
        self.limit = limit
        self._pid = os.getpid()
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conn_string: str) -> tuple[Engine, bool]:
        """(the engine of `conn_string`, whether it is new)."""
        with self._lock:
            if self._pid != os.getpid():
                for engine in self._engines.values():
                    engine.dispose(close=False)  # the parent's connections stay the parent's
                self._engines.clear()
                self._pid = os.getpid()
            engine = self._engines.get(conn_string)
            if engine is not None:
                self._engines.move_to_end(conn_string)
                return engine, False
            engine = db.create_engine(conn_string, pool_size=2, max_overflow=8,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            db.event.listen(engine, "connect", _normal_sync)
            self._engines[conn_string] = engine
            while len(self._engines) > self.limit:
                _, old = self._engines.popitem(last=False)
                old.dispose()
            return engine, True

    def dispose(self) -> None:
        with self._lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()


class _WalWatchdog(SqliteEventLogStorageWatchdog):
    """Dagster's watch of a run's events fires when the run's `.db` file changes. A kept
    connection commits into the `-wal` file and leaves the `.db` alone until a checkpoint,
    so this one fires on either."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._patterns = [self._log_path, self._log_path + "-wal"]

    def on_modified(self, event) -> None:  # type: ignore[no-untyped-def]
        self._process_log()


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's `SqliteEventLogStorage` with kept, pooled engines (see the module)."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        _check_version()
        self._engines = _Engines()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def config_type(cls):  # type: ignore[no-untyped-def]
        return {"base_dir": dg.StringSource}

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # type: ignore[no-untyped-def]
        """`base_dir` is the instance's root ($DAGSTER_HOME), as for `storage: sqlite:`."""
        return cls(_event_logs_directory(config_value["base_dir"]), inst_data=inst_data)

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine, new = self._engines.get(self.conn_string_for_shard(shard))
            if new or shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def watch(self, run_id, cursor, callback) -> None:  # type: ignore[no-untyped-def]
        from watchdog.observers import Observer

        if not self._obs:
            self._obs = Observer()
            self._obs.start()
        watchdog = _WalWatchdog(self, run_id, callback, cursor)
        self._watchers[run_id][callback] = (watchdog, self._obs.schedule(watchdog, self._base_dir, recursive=True))

    def wipe(self) -> None:
        self._engines.dispose()  # before the files go: a kept connection would write into a deleted file
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class SqliteRuns(SqliteRunStorage):
    """Dagster's sqlite run storage, `base_dir` being the instance's root, its connections
    kept as the event log's are (the daemon reads the runs several times a second)."""

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None):
        _check_version()
        self._engines = _Engines(limit=1)
        super().__init__(conn_string, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # type: ignore[no-untyped-def]
        return cls.from_local(inst_data=inst_data, base_dir=_runs_directory(config_value["base_dir"]))

    @contextlib.contextmanager
    def connect(self) -> Iterator[Connection]:
        engine, _ = self._engines.get(self._conn_string)
        with engine.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class SqliteSchedules(SqliteScheduleStorage):
    """Dagster's sqlite schedule storage, `base_dir` being the instance's root."""

    @classmethod
    def from_config_value(cls, inst_data, config_value):  # type: ignore[no-untyped-def]
        return cls.from_local(inst_data=inst_data, base_dir=_schedule_directory(config_value["base_dir"]))
