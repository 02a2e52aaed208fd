"""`yunque run` as a client of the Dagster instance, the way the UI is one: register the
corpus' shards as partitions, submit one asset backfill over the selection, and follow it
until it ends. The backfill daemon plans the runs in dependency order (per-shard runs,
then the whole-corpus joins, then the next per-shard level...), the run coordinator and
launcher of the instance's dagster.yaml start them, and the run queue's limits and pools
bound the concurrency. Nothing here executes an asset."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.events import DagsterEventType
from dagster._core.execution.backfill import (
    BULK_ACTION_TERMINAL_STATUSES,
    BulkActionStatus,
    PartitionBackfill,
)
from dagster._core.utils import make_new_backfill_id

from assets.partitions import in_unfinished_backfills
from assets.partitions import shards as shards_def
from pipelines.data.corpus import ShardInfo
from resources import CorpusStorage
from stages.data.plan import DataPlan

BACKFILL_TAG = "dagster/backfill"
# On a backfill `yunque run` submitted: which process follows it (the daemon it started
# cancels it if that process dies).
CLIENT_TAG = "yunque/client"
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
@contextlib.contextmanager
def home_lock(name: str = "setup") -> Iterator[None]:
    """Hold one of the instance's locks (a flock in $DAGSTER_HOME) until the block ends.
    Dagster checks and then acts, in two steps, so two commands on one home would
    otherwise both create the sqlite schema (`table ... already exists`), both add the same
    shard partitions (`UNIQUE constraint failed`) or both start a daemon ("setup", and
    "daemon" in `orchestration.daemon`). Commands on one machine take turns; the file is never
    deleted (a waiter would then hold a lock of its own)."""
    path = Path(os.environ["DAGSTER_HOME"]) / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def instance() -> dg.DagsterInstance:
    """The instance of $DAGSTER_HOME (`yunque.env.use_home` sets it), for the CLI, which
    reaches Dagster only through this package. Opened under `home_lock`: the first
    opening creates the storage's tables."""
    with home_lock():
        return dg.DagsterInstance.get()


def select(defs: dg.Definitions, selection: str | None) -> list[dg.AssetKey]:
    """The asset keys a selection string names (Dagster's own syntax), in topological order."""
    graph = defs.resolve_asset_graph()
    try:
        chosen = (dg.AssetSelection.from_string(selection) if selection else dg.AssetSelection.all()).resolve(graph)
    except Exception as e:  # the parser raises several error types; the user needs one message
        raise ValueError(f"cannot parse asset selection {selection!r}: {e}") from e
    if not chosen:
        raise ValueError(f"selection {selection!r} matches no asset; assets: "
                         f"{sorted(k.to_user_string() for k in graph.get_all_asset_keys())}")
    return [k for level in graph.toposorted_asset_keys_by_level for k in sorted(level) if k in chosen]


def register_shards(instance: dg.DagsterInstance, corpus: CorpusStorage,
                    listed: list[ShardInfo] | None = None) -> tuple[list[str], list[str]]:
    """Make the partitions match the corpus as listed now (`listed`, when the caller has
    listed it already): (present shards, deregistered). A shard that left the corpus is
    deregistered, as the shard sensor does, so that no later stage trains on it; unless an
    unfinished backfill targets it (deleting it would cancel that backfill's every run):
    then it stays until that backfill has ended, and the whole-corpus assets leave it out
    anyway (`stages.training.selection.consumed_shards`)."""
    found = [s.key for s in (corpus.shards() if listed is None else listed)]
    if not found:
        raise ValueError(f"no shards under {corpus.uri}: expected one subdirectory (or file) per shard")
    with home_lock():  # another command registering the same shards takes its turn
        known = set(instance.get_dynamic_partitions(shards_def.name))
        if new := [k for k in found if k not in known]:
            instance.add_dynamic_partitions(shards_def.name, new)
        gone = sorted(known - set(found))
        if gone:
            gone = sorted(set(gone) - in_unfinished_backfills(instance))
        for key in gone:
            instance.delete_dynamic_partition(shards_def.name, key)
    return found, gone


def backfill_title(text: str) -> str:
    """`text` as Dagster accepts a backfill title: at most 100 characters, none of `%*"`
    (a selection such as `key:*_model` has them); the full text goes in the description."""
    text = re.sub(r'[%*"]', "_", text)
    return text if len(text) <= 100 else text[:99] + "…"


def targets(instance: dg.DagsterInstance, defs: dg.Definitions, keys: list[dg.AssetKey], partitions: list[str],
            fresh: DataPlan | None = None) -> set[AssetKeyPartitionKey]:
    """What a backfill of `keys` must materialize: every partition in `partitions` of the
    per-shard assets and the whole-corpus assets once, less the data outputs that `fresh`
    (`stages.data.plan`) finds up to date and that the instance has a materialization of
    (so the UI shows what is on disk)."""
    graph = defs.resolve_asset_graph()
    out = set()
    for key in keys:
        name = key.to_user_string()
        if graph.get(key).partitions_def is None:
            if not (fresh and fresh.is_fresh(name) and instance.get_latest_materialization_event(key)):
                out.add(AssetKeyPartitionKey(key, None))
            continue
        recorded = instance.get_materialized_partitions(key) if fresh and name in fresh.fresh_shards else set()
        out |= {AssetKeyPartitionKey(key, p) for p in partitions
                if not (p in recorded and fresh.is_fresh(name, p))}
    return out


def lost_outputs(instance: dg.DagsterInstance, store, shards: list[str]) -> dict[str, list[str]]:
    """Data assets the instance records as materialized whose output the store no longer
    has (a store that lost objects, a data folder deleted by hand): asset -> the shards
    (["*"] for a whole-corpus asset). A local home only: a remote home's local cache may
    lack what the store has."""
    from stages.data import plan as data_plan

    out: dict[str, list[str]] = {}
    for name in data_plan.PER_SHARD:
        recorded = instance.get_materialized_partitions(dg.AssetKey(name)) & set(shards)
        if lost := sorted(p for p in recorded if not data_plan.in_store(store, name, p)):
            out[name] = lost
    for name in data_plan.WHOLE_CORPUS:
        if instance.get_latest_materialization_event(dg.AssetKey(name)) and not data_plan.in_store(store, name):
            out[name] = ["*"]
    return out


def submit(instance: dg.DagsterInstance, defs: dg.Definitions, chosen: set[AssetKeyPartitionKey],
           tags: dict[str, str], run_config: dict | None, title: str) -> str:
    """One asset backfill of the asset partitions `chosen` (`targets`). Returns its id."""
    subset = AssetGraphSubset.from_asset_partition_set(chosen, defs.resolve_asset_graph())
    backfill_id = make_new_backfill_id()
    short = backfill_title(title)
    instance.add_backfill(PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id, backfill_timestamp=time.time(), tags=tags, dynamic_partitions_store=instance,
        asset_graph_subset=subset, title=short, description=None if short == title else title, run_config=run_config))
    return backfill_id


def runs_in_flight(instance: dg.DagsterInstance, besides: Collection[str] = ()) -> list[str]:
    """Ids of the runs being started or executed that are not of the backfills `besides`,
    less those whose worker process is known and gone from this host (a run whose worker
    died with its disk stays STARTED until run monitoring fails it: nobody can wait for it,
    and a daemon of ours executes its runs on this host)."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=[
        dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]))
    return [r.run_id for r in runs if r.tags.get(BACKFILL_TAG) not in besides and not _worker_gone(instance, r.run_id)]


def _worker_gone(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether the run's worker, as its "Started process for run (pid: N)" event names it,
    is no longer a process here (False while no worker was recorded: it is starting)."""
    import psutil

    for r in instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT).records:
        pid = r.event_log_entry.dagster_event.engine_event_data.metadata.get("pid")
        if pid is not None:
            try:
                return psutil.Process(int(pid.value)).status() == psutil.STATUS_ZOMBIE
            except (psutil.NoSuchProcess, ValueError):
                return True
    return False


def free_slots(instance: dg.DagsterInstance) -> int:
    """Run slots the queue has free now: its `max_concurrent_runs` less the runs in flight
    (the machine's cores for a queue without a limit; at least one)."""
    queue = instance.get_concurrency_config().run_queue_config  # what the queue daemon reads
    limit = queue.max_concurrent_runs if queue is not None else -1
    if limit is None or limit < 0:
        limit = os.cpu_count() or 1
    return max(1, limit - len(runs_in_flight(instance)))


def client_id(pid: int | None = None) -> str:
    """`host:pid` of the process following a backfill (this one by default)."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


def cancel(instance: dg.DagsterInstance, backfill_id: str, no_daemon: bool = False) -> None:
    """What the UI's "Cancel backfill" does: the daemon then cancels its runs. With no
    daemon to do that (it failed to start, so no run exists; or it is stopping, and its
    runs with it), the backfill ends at once."""
    backfill = instance.get_backfill(backfill_id)
    if backfill is not None and backfill.status not in BULK_ACTION_TERMINAL_STATUSES:
        status = BulkActionStatus.CANCELED if no_daemon else BulkActionStatus.CANCELING
        instance.update_backfill(backfill.with_status(status))
