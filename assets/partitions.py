"""The shard partitions, and the one place a whole-corpus asset learns which shards it consumes."""

import dagster as dg

from resources import CorpusStorage, YunqueSettings

# One partition per corpus shard (a subdirectory or single file at the corpus root).
# Keys are registered by the shard sensor or by `yunque run`.
shards = dg.DynamicPartitionsDefinition(name="shards")


def in_unfinished_backfills(instance: dg.DagsterInstance, asset: dg.AssetKey | None = None) -> set[str]:
    """Shards that an unfinished backfill targets (of `asset`, or of any per-shard asset).
    Such a shard must stay registered until the backfill ends: Dagster fails a backfill
    whose targeted partitions were deleted, and cancels every run of it, the healthy
    shards' too."""
    from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus

    active = instance.get_backfills(filters=BulkActionsFilter(
        statuses=[BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING]))
    keys: set[str] = set()
    for backfill in active:
        data = backfill.asset_backfill_data if backfill.is_asset_backfill else None
        if data is None:
            continue
        by_asset = data.target_subset.partitions_subsets_by_asset_key
        for key in ([asset] if asset is not None else by_asset):
            if key in by_asset:
                keys |= set(by_asset[key].get_partition_keys())
    return keys


def consumed_shards(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: YunqueSettings,
                    corpus: CorpusStorage, upstream: str):
    """`stages.training.selection.consumed_shards` over the registered partitions and the corpus as listed now."""
    from stages.training import selection

    registered = context.instance.get_dynamic_partitions(shards.name)
    present = [s.key for s in corpus.shards()]
    return selection.consumed_shards(settings.store(), upstream, registered, present)
