"""The shard partitions, and the one place a whole-corpus asset learns which shards it consumes."""

import dagster as dg

from resources import CorpusStorage, YunqueSettings

# One partition per corpus shard (a subdirectory or single file at the corpus root).
# Keys are registered by the shard sensor or by `yunque run`.
shards = dg.DynamicPartitionsDefinition(name="shards")


def consumed_shards(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: YunqueSettings,
                    corpus: CorpusStorage, upstream: str):
    """`stages.selection.consumed_shards` over the registered partitions and the corpus as listed now."""
    from stages import selection

    registered = context.instance.get_dynamic_partitions(shards.name)
    present = [s.key for s in corpus.shards()]
    return selection.consumed_shards(settings.store(), upstream, registered, present)
