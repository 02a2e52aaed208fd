"""`yunque run`: materialize a selection of the graph for every shard of a corpus,
recorded in the Dagster instance under $YUNQUE_HOME so `dagster dev` shows it all.

Dagster runs carry at most one partition key, so the selection is cut into phases in
topological order: per-shard assets run once per shard (one run each), whole-corpus
assets (dedup_index) run once between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

from assets.definitions import ASSETS, CHECKS, build_resources, defs
from assets.partitions import shards as shards_def

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


def run_graph(
    corpus: str,
    select: str | None = None,
    preset: str = "tiny",
    overrides: str | None = None,
    endpoint_url: str | None = None,
    on_progress: Callable[[str, str, dict], None] | None = None,
) -> RunSummary:
    """Register the corpus' shards as partitions and materialize `select` for all of them.
    The Dagster instance is DagsterInstance.get() (DAGSTER_HOME, set by yunque.env)."""
    instance = dg.DagsterInstance.get()
    resources = build_resources(corpus=corpus, preset=preset, overrides=overrides, endpoint_url=endpoint_url)
    found = [s.key for s in resources["corpus"].shards()]
    if not found:
        raise ValueError(f"no shards under {corpus}: expected one subdirectory (or file) per shard")
    known = set(instance.get_dynamic_partitions(shards_def.name))
    if new := [k for k in found if k not in known]:
        instance.add_dynamic_partitions(shards_def.name, new)
    summary = RunSummary(shards=found)
    for i, phase in enumerate(plan(select)):
        names = ",".join(k.to_user_string() for k in phase.keys)
        for shard in found if phase.partitioned else [None]:
            result = dg.materialize(
                [*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*phase.keys), partition_key=shard,
                instance=instance, resources=resources, run_config=QUIET, raise_on_error=False,
                tags={"yunque/command": "run", "yunque/corpus": corpus},
            )
            assets_md = {
                e.asset_key.to_user_string(): {k: getattr(v, "value", v) for k, v in e.step_materialization_data.materialization.metadata.items()}
                for e in result.get_asset_materialization_events()
            }
            checks = [(c.check_name, c.passed) for c in result.get_asset_check_evaluations()]
            entry = {"phase": i, "assets": names, "shard": shard, "run_id": result.run_id,
                     "ok": result.success and all(p for _, p in checks), "metadata": assets_md, "checks": checks,
                     "error": None if result.success else _first_error(result)}
            summary.runs.append(entry)
            if on_progress:
                on_progress(names, shard or "(corpus)", entry)
        if any(not r["ok"] for r in summary.runs if r["phase"] == i):
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
