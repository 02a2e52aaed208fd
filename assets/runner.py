"""`yunque run`: materialize a selection of the graph for every shard of a corpus,
recorded in the Dagster instance under $YUNQUE_HOME so `dagster dev` shows it all.

Dagster runs carry at most one partition key, so the selection is cut into phases in
topological order: per-shard assets run once per shard (one run each), whole-corpus
assets (dedup_index) run once between them.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

import dagster as dg

from assets.definitions import ASSETS, CHECKS, build_resources, defs
from assets.partitions import shards as shards_def
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
    runs: list[dict] = field(default_factory=list)  # {phase, shard, run_id, ok, assets: {key: metadata}}

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.runs)


def plan(select: str | None) -> list[Phase]:
    graph = defs.resolve_asset_graph()
    try:
        selection = dg.AssetSelection.from_string(select) if select else dg.AssetSelection.all()
        chosen = selection.resolve(graph)
    except Exception as e:  # the parser raises several error types; the user needs one message
        if isinstance(e, ValueError) and "matches no asset" in str(e):
            raise
        raise ValueError(f"cannot parse asset selection {select!r}: {e}") from e
    if not chosen:
        raise ValueError(f"selection {select!r} matches no asset; assets: "
                         f"{sorted(k.to_user_string() for k in graph.get_all_asset_keys())}")
    phases: list[Phase] = []
    for level in graph.toposorted_asset_keys_by_level:
        for key in sorted(level):
            if key not in chosen:
                continue
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


def materialize_one(keys: list[str], shard: str | None, phase: int, corpus: str, preset: str,
                    overrides: dict | str | None, endpoint_url: str | None) -> dict:
    """One Dagster run: `keys` for one shard (or the whole corpus). Module-level and
    returning plain data so that it can run in a worker process."""
    instance = dg.DagsterInstance.get()
    reclaim_pool_slots(instance)
    resources = build_resources(corpus=corpus, preset=preset, overrides=overrides, endpoint_url=endpoint_url)
    result = dg.materialize(
        [*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys), partition_key=shard,
        instance=instance, resources=resources, run_config=QUIET, raise_on_error=False,
        tags={"yunque/command": "run", "yunque/corpus": corpus, "yunque/pid": str(os.getpid()),
              "yunque/host": socket.gethostname()},
    )
    assets_md = {
        e.asset_key.to_user_string(): {
            k: v.value for k, v in e.step_materialization_data.materialization.metadata.items()
            if isinstance(getattr(v, "value", None), (int, float, str, bool, dict, list))
        }
        for e in result.get_asset_materialization_events()
    }
    checks = [(c.check_name, c.passed) for c in result.get_asset_check_evaluations()]
    error = None if result.success else _first_error(result)
    if error is None and (missing := [k for k in keys if k not in assets_md]):
        error = f"not materialized: {missing} (see the run's logs)"
    if error is None and (bad := [n for n, passed in checks if not passed and n in BLOCKING]):
        error = f"blocking checks failed: {bad}"
    # Non-blocking check failures are reported, but later phases still run.
    warnings = [n for n, passed in checks if not passed and n not in BLOCKING]
    return {"phase": phase, "assets": ",".join(keys), "shard": shard, "run_id": result.run_id,
            "ok": error is None, "metadata": assets_md, "checks": checks, "warnings": warnings, "error": error}


def _failed(keys: list[str], shard: str | None, phase: int, exc: BaseException) -> dict:
    return {"phase": phase, "assets": ",".join(keys), "shard": shard, "run_id": None, "ok": False,
            "metadata": {}, "checks": [], "warnings": [], "error": f"{type(exc).__name__}: {exc}"}


def run_graph(
    corpus: str,
    select: str | None = None,
    preset: str = "tiny",
    overrides: dict | str | None = None,
    endpoint_url: str | None = None,
    on_progress: Callable[[str, str, dict], None] | None = None,
    workers: int = 1,
) -> RunSummary:
    """Register the corpus' shards as partitions and materialize `select` for all of them,
    `workers` shards at a time (separate processes: the stages are CPU-bound Python).
    The Dagster instance is DagsterInstance.get() (DAGSTER_HOME, set by `yunque.env.use_home`)."""
    # A bad preset or override fails here (stages.config.ConfigError), before any run exists.
    resources = build_resources(corpus=corpus, preset=preset, overrides=overrides, endpoint_url=endpoint_url)
    instance = dg.DagsterInstance.get()
    shards = resources["corpus"].shards()
    if not shards:
        raise ValueError(f"no shards under {corpus}: expected one subdirectory (or file) per shard")
    found = [s.key for s in shards]
    known = set(instance.get_dynamic_partitions(shards_def.name))
    if new := [k for k in found if k not in known]:
        instance.add_dynamic_partitions(shards_def.name, new)
    # Biggest shards first, so that parallel workers finish at about the same time.
    by_size = [s.key for s in sorted(shards, key=lambda s: -sum(size for _, size, _ in s.files))]
    summary = RunSummary(shards=found)
    common = (corpus, preset, overrides, endpoint_url)
    pool = None
    if workers > 1 and len(found) > 1:
        # spawn, not fork: Dagster and the sqlite connections of this process must not be
        # inherited half-initialised by the children.
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        for i, phase in enumerate(plan(select)):
            keys = [k.to_user_string() for k in phase.keys]
            targets = by_size if phase.partitioned else [None]
            if pool is not None and len(targets) > 1:
                futures = {pool.submit(materialize_one, keys, t, i, *common): t for t in targets}
                entries = (_result(f, keys, futures[f], i) for f in as_completed(futures))
            else:
                entries = (materialize_one(keys, t, i, *common) for t in targets)
            for entry in entries:
                summary.runs.append(entry)
                if on_progress:
                    on_progress(entry["assets"], entry["shard"] or "(corpus)", entry)
            if any(not r["ok"] for r in summary.runs if r["phase"] == i):
                break  # later phases need this one's outputs; the failures say which shard and why
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return summary


def _result(future, keys: list[str], shard: str | None, phase: int) -> dict:
    """A worker that died (killed for memory, say) is one failed shard, not a traceback."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - reported as that shard's failure
        return _failed(keys, shard, phase, e)


def _first_error(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            while err.cause is not None:  # the user code's own exception, not Dagster's wrapper
                err = err.cause
            return f"{event.step_key}: {err.message.strip()}"
    return "run failed"
