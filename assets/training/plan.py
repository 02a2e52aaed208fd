"""Which model outputs are up to date, asked before anything runs.

A model asset's key depends on what training produced, so it is not known without running.
Instead each records on its materialization the `yunque/plan` tag (`plan_tags`): a hash of
the resolved configuration, its code version and its inputs' data versions when the step
starts. An output is up to date (`model_fresh`) when its latest materialization carries the
tag the same inputs would give now, none of its inputs is about to run, and no blocking
check failed on it. Changes made outside Dagster are not seen.
docs/operations.md#yunque-run.
"""

import json

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from dagster._core.events import DagsterEventType
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from resources import YunqueSettings
from stages.store.keys import cache_key

PLAN_TAG = "yunque/plan"


def config_hash(settings: YunqueSettings) -> str:
    return cache_key(json.dumps(settings.data_config().to_dict(), sort_keys=True, default=str))


def _input_version(instance: dg.DagsterInstance, graph: AssetGraph, dep: dg.AssetKey) -> str:
    partitions = graph.get(dep).partitions_def
    if partitions is None:
        event = instance.get_latest_materialization_event(dep)
        return (event.asset_materialization.tags or {}).get(DATA_VERSION_TAG, "?") if event else "missing"
    keys = list(partitions.get_partition_keys(dynamic_partitions_store=instance))
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        dep, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG], asset_partitions=keys)
    return cache_key(sorted((k, tags.get(k, {}).get(DATA_VERSION_TAG, "missing")) for k in keys))


def plan_value(instance: dg.DagsterInstance, graph: AssetGraph, key: dg.AssetKey, config: str) -> str:
    """What `key`'s plan tag is with the inputs as the instance has them now."""
    node = graph.get(key)
    inputs = {dep.to_user_string(): _input_version(instance, graph, dep) for dep in sorted(node.parent_keys)}
    return cache_key(config, node.code_version, inputs)


def plan_tags(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dict[str, str]:
    """The tag a model asset records on its materialization; call it as the step starts."""
    graph = context.job_def.asset_layer.asset_graph  # a run of dg.materialize has no repository
    return {PLAN_TAG: plan_value(context.instance, graph, context.asset_key, config_hash(settings))}


def _blocked(instance: dg.DagsterInstance, graph: AssetGraph, key: dg.AssetKey, storage_id: int) -> bool:
    """Whether a blocking check failed on the materialization `storage_id`."""
    blocking = [c for c in graph.get(key).check_keys if graph.get_check_spec(c).blocking]
    if not blocking:
        return False
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(blocking)
    for record in latest.values():
        evaluation = record.evaluation
        target = evaluation.target_materialization_data if evaluation else None
        if (record.status == AssetCheckExecutionRecordStatus.FAILED and target is not None
                and target.storage_id == storage_id):
            return True
    return False


def model_fresh(instance: dg.DagsterInstance, graph: AssetGraph, keys: list[dg.AssetKey], running: set[dg.AssetKey],
                settings: YunqueSettings) -> set[dg.AssetKey]:
    """The unpartitioned `keys` that are up to date, given the assets in `running` that
    will run (inputs about to change). `keys` are checked in topological order, so an
    asset whose input must run is not up to date either."""
    config = config_hash(settings)
    order = {k: i for i, k in enumerate(graph.toposorted_asset_keys)}
    must_run, fresh = set(running), set()
    for key in sorted(keys, key=order.__getitem__):
        latest = instance.fetch_materializations(key, limit=1).records
        record = latest[0] if latest else None
        ok = (record is not None and not (graph.get(key).parent_keys & must_run)
              and (record.asset_materialization.tags or {}).get(PLAN_TAG) == plan_value(instance, graph, key, config)
              and not _blocked(instance, graph, key, record.storage_id))
        (fresh if ok else must_run).add(key)
    return fresh
