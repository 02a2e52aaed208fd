"""`yunque run --in-process`, for debugging and for tests of the stages: materialize a
selection of the graph in this process, one run after another, recorded in the Dagster
instance under $YUNQUE_HOME. The main path (`orchestration.client`) submits a backfill to the
daemon instead; this one bypasses the run queue, the launcher and its concurrency.

The selection is cut into phases in topological order: the per-shard assets of one step
run over batches of shards (`assets.batch`: one run per batch, as a backfill makes them),
whole-corpus assets (dedup_index) run once between them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from assets.batch import SHARDS_PER_RUN, batches
from assets.definitions import ASSETS, CHECKS, build_resources, definitions_with
from assets.partitions import shards as shards_def
from model.launch.supervise import live_pgid
from orchestration.client import RANGE_END_TAG, RANGE_START_TAG, register_shards
from orchestration.client import select as select_keys
from orchestration.follower import RunReport, explained
from stages.preset_names import DEFAULT_PRESET

# Checks whose failure stops the pipeline (Dagster also skips downstream assets for them).
BLOCKING = {spec.key.name for c in [*CHECKS, *ASSETS] for spec in c.check_specs if spec.blocking}

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class Phase:
    keys: list[dg.AssetKey]
    partitioned: bool


@dataclass
class RunSummary:
    shards: list[str]
    runs: list[RunReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)


def plan(select: str | None, defs: dg.Definitions | None = None) -> list[Phase]:
    defs = defs or definitions_with(build_resources())
    graph = defs.resolve_asset_graph()
    phases: list[Phase] = []
    step_of = {k: a for a in ASSETS for k in a.keys}
    for key in select_keys(defs, select):
        part = graph.get(key).partitions_def is not None
        # Parents come first in topological order, so a whole-corpus key joins the last phase
        # if it is whole-corpus too; a per-shard key only joins the keys of its own step (a
        # batch step reports its shards one by one, without the outputs a later step in the
        # same run would wait for).
        if phases and phases[-1].partitioned == part and (
                not part or step_of[phases[-1].keys[-1]] is step_of[key]):
            phases[-1].keys.append(key)
        else:
            phases.append(Phase([key], part))
    return phases


def reclaim_pool_slots(instance: dg.DagsterInstance) -> list[str]:
    """Free concurrency-pool slots held by runs that can no longer release them: finished
    runs, and `yunque run` runs whose process on this host is gone (killed mid-training).
    Without a daemon watching, such a slot would block every later training run forever.
    Runs started elsewhere (daemon, UI) are left to Dagster's run monitoring."""
    storage, freed = instance.event_log_storage, []
    for key in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(key)
        for run_id in {s.run_id for s in info.claimed_slots} | {p.run_id for p in info.pending_steps}:
            run = instance.get_run_by_id(run_id)
            gone = run is None or run.is_finished or (
                run.tags.get("yunque/host") == socket.gethostname() and "yunque/pid" in run.tags
                and live_pgid(run.tags["yunque/pid"]) is None)
            if not gone:
                continue
            storage.free_concurrency_slots_for_run(run_id)
            if run is not None and not run.is_finished:
                instance.report_run_failed(run, f"the process running it ({run.tags['yunque/pid']}) is gone")
            freed.append(run_id)
    return freed


def materialize_one(keys: list[str], shards: list[str], resources: dict) -> RunReport:
    """One Dagster run in this process: `keys` for a batch of shards (a contiguous range of
    the registered partitions), or for the whole corpus (`shards` empty)."""
    instance = dg.DagsterInstance.get()
    reclaim_pool_slots(instance)
    tags = {"yunque/command": "run", "yunque/pid": str(os.getpid()), "yunque/host": socket.gethostname()}
    if len(shards) > 1:
        tags |= {RANGE_START_TAG: shards[0], RANGE_END_TAG: shards[-1]}
    result = dg.materialize(
        [*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
        partition_key=shards[0] if len(shards) == 1 else None,
        instance=instance, resources=resources, run_config=QUIET, raise_on_error=False, tags=tags,
    )
    rep = RunReport(result.run_id, shards, result.success, "SUCCESS" if result.success else "FAILURE")
    for e in result.get_asset_materialization_events():
        rep.add_materialization(e.step_materialization_data.materialization)
    for c in result.get_asset_check_evaluations():
        rep.add_check(c.asset_key, c.partition, c.check_name, c.passed, c.check_name in BLOCKING, c.description)
    error = None if result.success else _first_error(result)
    if error is None and (missing := [k for k in keys if k not in rep.assets]):
        error = f"not materialized: {missing} (see the run's logs)"
    if error is None and (bad := [f"{a}:{n}" for a, n, passed, blocking in rep.checks if blocking and not passed]):
        error = f"blocking checks failed: {bad}"
    rep.ok, rep.error = error is None, error
    return rep


def run_graph(
    corpus: str,
    select: str | None = None,
    preset: str = DEFAULT_PRESET,
    overrides: dict | str | None = None,
    endpoint_url: str | None = None,
    on_progress: Callable[[RunReport], None] | None = None,
    shards_per_run: int = SHARDS_PER_RUN,
) -> RunSummary:
    """Register the corpus' shards as partitions (deregistering the gone ones) and
    materialize `select` for all of them, one run after another. The Dagster instance is
    DagsterInstance.get() (DAGSTER_HOME, set by `yunque.env.use_home`)."""
    # A bad preset or override fails here (stages.config.ConfigError), before any run exists.
    resources = build_resources(corpus=corpus, preset=preset, overrides=overrides, endpoint_url=endpoint_url)
    instance = dg.DagsterInstance.get()
    found, _ = register_shards(instance, resources["corpus"])
    order = list(instance.get_dynamic_partitions(shards_def.name))
    summary = RunSummary(shards=found)
    for phase in plan(select, definitions_with(resources)):
        keys = [k.to_user_string() for k in phase.keys]
        for target in batches(order, found, shards_per_run) if phase.partitioned else [[]]:
            report = materialize_one(keys, target, resources)
            summary.runs.append(report)
            if on_progress:
                on_progress(report)
        if not summary.ok:
            break  # later phases need this one's outputs; the failures say which shard and why
    return summary


def _first_error(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            return f"{event.step_key}: {explained(event.step_failure_data.error)}"
    return "run failed"
