"""Following a backfill the way the UI shows it: its progress, each finished run as a
`RunReport` (what each asset did, its checks, the cause of a failure in words), the assets
of a long run as they land, and the steps put up for retry. Reads the instance only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES, PartitionBackfill

from assets.partitions import shards as shards_def
from orchestration.client import BACKFILL_TAG, PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG
from resources import CorpusStorage

EVENTS = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION,
          DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}
STEP_EVENTS = {DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE,
               DagsterEventType.STEP_SKIPPED, DagsterEventType.STEP_UP_FOR_RETRY}
# Read as they happen from a run of no shards (the model half is one run of many assets),
# so that each asset's line comes when it materializes, not when the whole chain ends.
LIVE_EVENTS = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION}


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


FAILURE_PREFIX = "dagster._core.definitions.events.Failure: "


def explained(err) -> str:
    """What a user should read of an error chain: the message of the `dg.Failure` our code
    raised, whose words explain the raw error it was raised from (a training's exit code
    -9 becomes "killed (SIGKILL): ..."), else the deepest cause's (the user code's own
    exception); "" for none."""
    chain = []
    while err is not None:
        chain.append(err)
        err = err.cause
    if not chain:
        return ""
    chosen = next((e for e in chain if e.cls_name == "Failure"), chain[-1])
    return chosen.message.strip().removeprefix(FAILURE_PREFIX)


def _cause(err) -> str:
    """The first line of `explained`."""
    return _first_line(explained(err))


@dataclass
class RunReport:
    """One finished run of the backfill, for the terminal. A per-shard run covers a batch
    of shards (`assets.batch`); a whole-corpus run covers none."""

    run_id: str
    shards: list[str]
    ok: bool
    status: str
    assets: dict[str, dict] = field(default_factory=dict)  # asset -> plain metadata (its last event in the run)
    per_shard: dict[tuple[str, str], dict] = field(default_factory=dict)  # (asset, shard) -> plain metadata
    checks: list[tuple[str, str, bool, bool]] = field(default_factory=list)  # (asset[shard], check, passed, blocking)
    error: str | None = None
    # the assets of this run whose lines were printed while it ran (`Follower.new_live`)
    shown: set[str] = field(default_factory=set)
    # what the run's failed checks said, one line each (a WARN's description is its news)
    notes: list[str] = field(default_factory=list)

    @property
    def partition(self) -> str | None:
        """The shard of a one-shard run."""
        return self.shards[0] if len(self.shards) == 1 else None

    @property
    def label(self) -> str:
        if not self.shards:
            return "corpus"
        if len(self.shards) == 1:
            return self.shards[0]
        return f"{len(self.shards)} shards: {self.shards[0]} .. {self.shards[-1]}"

    @property
    def failed_checks(self) -> list[str]:
        return [f"{a}:{c}" for a, c, passed, _ in self.checks if not passed]

    def add_materialization(self, m: dg.AssetMaterialization) -> None:
        md = plain(m.metadata)
        asset = m.asset_key.to_user_string()
        self.assets[asset] = md
        if m.partition is not None:
            self.per_shard[(asset, m.partition)] = md

    def add_check(self, asset: dg.AssetKey, partition: str | None, name: str, passed: bool, blocking: bool,
                  description: str | None = None) -> None:
        label = asset.to_user_string() + (f"[{partition}]" if partition else "")
        self.checks.append((label, name, passed, blocking))
        if not passed and description:
            self.notes.append(f"{label}:{name}: {' '.join(description.split())}")


def plain(metadata: dict) -> dict:
    """The metadata values a terminal can print (numbers, text, JSON)."""
    return {k: v.value for k, v in metadata.items()
            if isinstance(getattr(v, "value", None), (int, float, str, bool, dict, list))}


def run_label(run: dg.DagsterRun) -> str | None:
    """A run's shard, or its range of shards, as tagged."""
    if (key := run.tags.get(PARTITION_TAG)) is not None:
        return key
    start, end = run.tags.get(RANGE_START_TAG), run.tags.get(RANGE_END_TAG)
    return None if start is None else start if start == end else f"{start}..{end}"


def run_shards(run: dg.DagsterRun, order: list[str]) -> list[str]:
    """The shards a run covers: its partition, or its range in the partitions' order."""
    if (key := run.tags.get(PARTITION_TAG)) is not None:
        return [key]
    start, end = run.tags.get(RANGE_START_TAG), run.tags.get(RANGE_END_TAG)
    if start is None or end is None:
        return []
    if start in order and end in order:
        return order[order.index(start): order.index(end) + 1]
    return [start] if start == end else [start, end]


@dataclass
class Retry:
    """A step that failed and that Dagster will run again (its RetryPolicy)."""

    run_id: str
    step: str
    attempt: int  # the attempt about to start (2 for the first retry)
    cause: str


@dataclass
class Progress:
    status: str
    planned: int  # asset partitions the backfill targets
    done: int  # materialized, or failed (with what cannot run after them)
    failed: int
    active: list[tuple[str, str | None]]  # (asset step in progress, partition)


class Follower:
    """Follows one backfill and its runs. Each `poll` reads the backfill once and its runs
    once, whatever their number; `progress` then reads only the new step events of the runs
    in flight (at most the run queue's limit). Each finished run is reported once."""

    def __init__(self, instance: dg.DagsterInstance, backfill_id: str):
        self.instance, self.backfill_id = instance, backfill_id
        self.reported: set[str] = set()
        self.reports: list[RunReport] = []
        self._partitions: list[str] | None = None
        self._backfill: PartitionBackfill | None = None
        self._runs: list[dg.DagsterRun] = []
        self._cursors: dict[str, str | None] = {}  # run id -> event log cursor of its step events
        self._steps: dict[str, tuple[set[str], set[str]]] = {}  # run id -> (started, ended) step keys
        self._live: list[RunReport] = []  # assets materialized in runs still going, not yet returned
        self._shown: dict[str, set[str]] = {}  # run id -> assets returned by `new_live`
        self._retries: list[Retry] = []
        self._attempts: dict[tuple[str, str], int] = {}

    def poll(self) -> None:
        # the backfill before its runs: a run that ends after this read is seen next poll
        self._backfill = self.instance.get_backfill(self.backfill_id)
        self._runs = list(self.instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: self.backfill_id})))

    def progress(self) -> Progress:
        if self._backfill is None:
            self.poll()
        data = self._backfill.asset_backfill_data
        failed = data.failed_and_downstream_subset.num_partitions_and_non_partitioned_assets
        done = data.materialized_subset.num_partitions_and_non_partitioned_assets + failed
        active = []
        for run in self._runs:
            if run.is_finished:
                self._cursors.pop(run.run_id, None)
                self._steps.pop(run.run_id, None)
                continue
            started, ended = self._steps.setdefault(run.run_id, (set(), set()))
            # per-shard runs' materializations (a thousand a level) wait for the run's end
            live = run_label(run) is None
            got = self.instance.get_records_for_run(run.run_id, cursor=self._cursors.get(run.run_id),
                                                   of_type=STEP_EVENTS | LIVE_EVENTS if live else STEP_EVENTS)
            self._cursors[run.run_id] = got.cursor
            for r in got.records:
                ev = r.event_log_entry.dagster_event
                if ev.event_type in LIVE_EVENTS:
                    self._add_live(run.run_id, ev)
                elif ev.event_type == DagsterEventType.STEP_UP_FOR_RETRY:
                    n = self._attempts[(run.run_id, ev.step_key)] = self._attempts.get((run.run_id, ev.step_key), 1) + 1
                    self._retries.append(Retry(run.run_id, ev.step_key, n, _cause(ev.step_retry_data.error)))
                else:
                    (started if ev.event_type == DagsterEventType.STEP_START else ended).add(ev.step_key)
            active += [(s, run_label(run)) for s in sorted(started - ended)]
        return Progress(self._backfill.status.value, data.target_subset.num_partitions_and_non_partitioned_assets,
                        done, failed, active)

    def _add_live(self, run_id: str, ev) -> None:
        if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            rep = RunReport(run_id, [], True, "STARTED")
            rep.add_materialization(ev.step_materialization_data.materialization)
            self._live.append(rep)
        else:  # a check of an asset materialized just before
            c = ev.asset_check_evaluation_data
            target = next((rep for rep in reversed(self._live) if rep.run_id == run_id
                           and c.asset_key.to_user_string() in rep.assets), None)
            if target is not None:
                target.add_check(c.asset_key, c.partition, c.check_name, c.passed, bool(c.blocking), c.description)

    def new_live(self) -> Iterator[RunReport]:
        """One report per asset that a run of no shards materialized since the last call,
        with its checks as far as they were read (`progress` reads them). The run's own
        report, when it ends, leaves these assets out (`RunReport.shown`)."""
        ready, self._live = self._live, []
        for rep in ready:
            self._shown.setdefault(rep.run_id, set()).update(rep.assets)
            yield rep

    def new_retries(self) -> list[Retry]:
        """The steps put up for retry since the last call."""
        out, self._retries = self._retries, []
        return out

    def finished(self) -> bool:
        if self._backfill is None:
            self.poll()
        return self._backfill.status in BULK_ACTION_TERMINAL_STATUSES

    def new_reports(self) -> Iterator[RunReport]:
        for run in sorted((r for r in self._runs if r.is_finished), key=lambda r: r.run_id):
            if run.run_id in self.reported:
                continue
            self.reported.add(run.run_id)
            report = self._report(run)
            self.reports.append(report)
            yield report

    def _report(self, run: dg.DagsterRun) -> RunReport:
        run_end = None
        rep = RunReport(run.run_id, run_shards(run, self._order()), run.status == dg.DagsterRunStatus.SUCCESS,
                        run.status.value)
        for r in self.instance.get_records_for_run(run.run_id, of_type=EVENTS).records:
            ev = r.event_log_entry.dagster_event
            if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                rep.add_materialization(ev.step_materialization_data.materialization)
            elif ev.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                c = ev.asset_check_evaluation_data
                rep.add_check(c.asset_key, c.partition, c.check_name, c.passed, bool(c.blocking), c.description)
            elif ev.event_type == DagsterEventType.STEP_FAILURE and rep.error is None:
                rep.error = f"{ev.step_key}: {explained(ev.step_failure_data.error) or 'failed'}"
            elif ev.event_type in (DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED):
                data = ev.event_specific_data
                cause = _cause(getattr(data, "error", None)) or _first_line(ev.message or r.event_log_entry.user_message)
                run_end = f"run {run.status.value.lower()}: {cause}" if cause else None
        rep.shown = self._shown.pop(run.run_id, set())
        if not rep.ok and rep.error is None:
            # no step failed: the run itself ended (a worker that died, a cancellation, a
            # launch that failed); its own event says why, the run's logs say more
            rep.error = f"{run_end} (run's logs: UI > Runs > {run.run_id[:8]})" if run_end else \
                f"run {run.status.value.lower()} (see the run's logs)"
        return rep

    def _order(self) -> list[str]:
        if self._partitions is None:
            self._partitions = list(self.instance.get_dynamic_partitions(shards_def.name))
        return self._partitions


def failed_only_on(reports: list[RunReport], corpus: CorpusStorage) -> list[str]:
    """The shards whose failure alone stopped a backfill, when every run that failed did so
    only on shards no longer in the corpus (removed mid-run); else []. A batch run that
    failed on one shard materialized the others: those are not failures."""
    failed: set[str] = set()
    for r in reports:
        if r.ok:
            continue
        if not r.shards:  # a whole-corpus run failed by itself
            return []
        assets = {a for a, _ in r.per_shard}
        failed |= {s for s in r.shards if not assets or any((a, s) not in r.per_shard for a in assets)}
    if not failed:
        return []
    return sorted(failed) if failed.isdisjoint(s.key for s in corpus.shards()) else []
