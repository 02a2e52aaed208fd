"""`yunque run` as a client of the Dagster instance, the way the UI is one: register the
corpus' shards as partitions, submit one asset backfill over the selection, and follow it
until it ends. The backfill daemon plans the runs in dependency order (per-shard runs,
then the whole-corpus joins, then the next per-shard level...), the run coordinator and
launcher of the instance's dagster.yaml start them, and the run queue's limits and pools
bound the concurrency. Nothing here executes an asset."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

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

from assets.partitions import shards as shards_def
from resources import CorpusStorage

BACKFILL_TAG = "dagster/backfill"
EVENTS = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION,
          DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_START}


def instance() -> dg.DagsterInstance:
    """The instance of $DAGSTER_HOME (`yunque.env.use_home` sets it), for the CLI, which
    reaches Dagster only through this package."""
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


def register_shards(instance: dg.DagsterInstance, corpus: CorpusStorage) -> tuple[list[str], list[str]]:
    """Make the partitions match the corpus as listed now: (present shards, deregistered).
    A shard that left the corpus is deregistered, as the shard sensor does, so that no
    later stage trains on it."""
    found = [s.key for s in corpus.shards()]
    if not found:
        raise ValueError(f"no shards under {corpus.uri}: expected one subdirectory (or file) per shard")
    known = set(instance.get_dynamic_partitions(shards_def.name))
    if new := [k for k in found if k not in known]:
        instance.add_dynamic_partitions(shards_def.name, new)
    gone = sorted(known - set(found))
    for key in gone:
        instance.delete_dynamic_partition(shards_def.name, key)
    return found, gone


def backfill_title(text: str) -> str:
    """`text` as Dagster accepts a backfill title: at most 100 characters, none of `%*"`
    (a selection such as `key:*_model` has them); the full text goes in the description."""
    text = re.sub(r'[%*"]', "_", text)
    return text if len(text) <= 100 else text[:99] + "…"


def submit(instance: dg.DagsterInstance, defs: dg.Definitions, keys: list[dg.AssetKey], partitions: list[str],
           tags: dict[str, str], run_config: dict | None, title: str) -> str:
    """One asset backfill of `keys`: every partition in `partitions` of the per-shard
    assets, the whole-corpus assets once. Returns the backfill id."""
    graph = defs.resolve_asset_graph()
    targets = set()
    for key in keys:
        if graph.get(key).partitions_def is None:
            targets.add(AssetKeyPartitionKey(key, None))
        else:
            targets |= {AssetKeyPartitionKey(key, p) for p in partitions}
    subset = AssetGraphSubset.from_asset_partition_set(targets, graph)
    backfill_id = make_new_backfill_id()
    short = backfill_title(title)
    instance.add_backfill(PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id, backfill_timestamp=time.time(), tags=tags, dynamic_partitions_store=instance,
        asset_graph_subset=subset, title=short, description=None if short == title else title, run_config=run_config))
    return backfill_id


def cancel(instance: dg.DagsterInstance, backfill_id: str, no_daemon: bool = False) -> None:
    """What the UI's "Cancel backfill" does: the daemon then cancels its runs. With no
    daemon to do that (it failed to start, so no run exists), the backfill ends at once."""
    backfill = instance.get_backfill(backfill_id)
    if backfill is not None and backfill.status not in BULK_ACTION_TERMINAL_STATUSES:
        status = BulkActionStatus.CANCELED if no_daemon else BulkActionStatus.CANCELING
        instance.update_backfill(backfill.with_status(status))


@dataclass
class RunReport:
    """One finished run of the backfill, for the terminal."""

    run_id: str
    partition: str | None
    ok: bool
    status: str
    assets: dict[str, dict] = field(default_factory=dict)  # asset -> plain metadata
    checks: list[tuple[str, str, bool, bool]] = field(default_factory=list)  # (asset, check, passed, blocking)
    error: str | None = None

    @property
    def failed_checks(self) -> list[str]:
        return [f"{a}:{c}" for a, c, passed, _ in self.checks if not passed]


@dataclass
class Progress:
    status: str
    planned: int  # asset partitions the backfill targets
    done: int  # materialized, or failed (with what cannot run after them)
    failed: int
    active: list[tuple[str, str | None]]  # (asset step in progress, partition)


class Follower:
    """Polls one backfill and its runs; each finished run is reported once."""

    def __init__(self, instance: dg.DagsterInstance, backfill_id: str):
        self.instance, self.backfill_id = instance, backfill_id
        self.reported: set[str] = set()
        self.reports: list[RunReport] = []

    def progress(self) -> Progress:
        backfill = self.instance.get_backfill(self.backfill_id)
        data = backfill.asset_backfill_data
        failed = data.failed_and_downstream_subset.num_partitions_and_non_partitioned_assets
        done = data.materialized_subset.num_partitions_and_non_partitioned_assets + failed
        active = []
        for run in self._runs(finished=False):
            started, ended = set(), set()
            for r in self.instance.get_records_for_run(run.run_id, of_type=EVENTS).records:
                ev = r.event_log_entry.dagster_event
                if ev.event_type == DagsterEventType.STEP_START:
                    started.add(ev.step_key)
                elif ev.event_type in (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE):
                    ended.add(ev.step_key)
            active += [(s, run.tags.get("dagster/partition")) for s in sorted(started - ended)]
        return Progress(backfill.status.value, data.target_subset.num_partitions_and_non_partitioned_assets,
                        done, failed, active)

    def finished(self) -> bool:
        return self.instance.get_backfill(self.backfill_id).status in BULK_ACTION_TERMINAL_STATUSES

    def new_reports(self) -> Iterator[RunReport]:
        for run in sorted(self._runs(finished=True), key=lambda r: r.run_id):
            if run.run_id in self.reported:
                continue
            self.reported.add(run.run_id)
            report = self._report(run)
            self.reports.append(report)
            yield report

    def _runs(self, finished: bool) -> list[dg.DagsterRun]:
        runs = self.instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: self.backfill_id}))
        return [r for r in runs if r.is_finished == finished]

    def _report(self, run: dg.DagsterRun) -> RunReport:
        rep = RunReport(run.run_id, run.tags.get("dagster/partition"), run.status == dg.DagsterRunStatus.SUCCESS,
                        run.status.value)
        for r in self.instance.get_records_for_run(run.run_id, of_type=EVENTS).records:
            ev = r.event_log_entry.dagster_event
            if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                m = ev.step_materialization_data.materialization
                rep.assets[m.asset_key.to_user_string()] = {
                    k: v.value for k, v in m.metadata.items()
                    if isinstance(getattr(v, "value", None), (int, float, str, bool, dict, list))}
            elif ev.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                c = ev.asset_check_evaluation_data
                rep.checks.append((c.asset_key.to_user_string(), c.check_name, c.passed, bool(c.blocking)))
            elif ev.event_type == DagsterEventType.STEP_FAILURE and rep.error is None:
                err = ev.step_failure_data.error
                while err is not None and err.cause is not None:  # the user code's own exception
                    err = err.cause
                rep.error = f"{ev.step_key}: {err.message.strip() if err else 'failed'}"
        if not rep.ok and rep.error is None:
            rep.error = f"run {run.status.value.lower()} (see the run's logs)"
        return rep
