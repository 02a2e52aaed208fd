"""`yunque run --in-process`, for debugging and for tests of the stages: materialize a
selection of the graph in this process, one run after another, recorded in the Dagster
instance under $YUNQUE_HOME. The main path (`assets.client`) submits a backfill to the
daemon instead; this one bypasses the run queue, the launcher and its concurrency.

Dagster runs carry at most one partition key, so the selection is cut into phases in
topological order: per-shard assets run once per shard (one run each), whole-corpus
assets (dedup_index) run once between them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from assets.client import RunReport, register_shards
from assets.client import select as select_keys
from assets.definitions import ASSETS, CHECKS, build_resources, defs
from model.launch import live_pgid

# Checks whose failure stops the pipeline (Dagster also skips downstream assets for them).
BLOCKING = {spec.key.name for c in CHECKS for spec in c.check_specs if spec.blocking}

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


def plan(select: str | None) -> list[Phase]:
    graph = defs.resolve_asset_graph()
    phases: list[Phase] = []
    for key in select_keys(defs, select):
        part = graph.get(key).partitions_def is not None
        # Parents come first in topological order, so a key can join the last phase
        # whenever the partitioning matches: same-partition deps run inside one run.
        if phases and phases[-1].partitioned == part:
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


def materialize_one(keys: list[str], shard: str | None, resources: dict) -> RunReport:
    """One Dagster run in this process: `keys` for one shard (or the whole corpus)."""
    instance = dg.DagsterInstance.get()
    reclaim_pool_slots(instance)
    result = dg.materialize(
        [*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys), partition_key=shard,
        instance=instance, resources=resources, run_config=QUIET, raise_on_error=False,
        tags={"yunque/command": "run", "yunque/pid": str(os.getpid()), "yunque/host": socket.gethostname()},
    )
    rep = RunReport(result.run_id, shard, result.success, "SUCCESS" if result.success else "FAILURE")
    for e in result.get_asset_materialization_events():
        m = e.step_materialization_data.materialization
        rep.assets[e.asset_key.to_user_string()] = {
            k: v.value for k, v in m.metadata.items()
            if isinstance(getattr(v, "value", None), (int, float, str, bool, dict, list))}
    rep.checks = [(c.asset_key.to_user_string(), c.check_name, c.passed, c.check_name in BLOCKING)
                  for c in result.get_asset_check_evaluations()]
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
    preset: str = "tiny",
    overrides: dict | str | None = None,
    endpoint_url: str | None = None,
    on_progress: Callable[[RunReport], None] | None = None,
) -> RunSummary:
    """Register the corpus' shards as partitions (deregistering the gone ones) and
    materialize `select` for all of them, one run after another. The Dagster instance is
    DagsterInstance.get() (DAGSTER_HOME, set by `yunque.env.use_home`)."""
    # A bad preset or override fails here (stages.config.ConfigError), before any run exists.
    resources = build_resources(corpus=corpus, preset=preset, overrides=overrides, endpoint_url=endpoint_url)
    found, _ = register_shards(dg.DagsterInstance.get(), resources["corpus"])
    summary = RunSummary(shards=found)
    for phase in plan(select):
        keys = [k.to_user_string() for k in phase.keys]
        for target in found if phase.partitioned else [None]:
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
            err = event.step_failure_data.error
            while err.cause is not None:  # the user code's own exception, not Dagster's wrapper
                err = err.cause
            return f"{event.step_key}: {err.message.strip()}"
    return "run failed"
