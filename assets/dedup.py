"""minhash_signatures (per shard), dedup_index (whole corpus), deduped_documents (per shard)."""

import dagster as dg

from assets.filtering import filtered_documents
from assets.metadata import stage_result
from assets.partitions import consumed_shards, shards
from resources import CorpusStorage, YunqueSettings
from stages.dedup import StaleIndexError, dedup_index_stage, deduped_stage, minhash_stage
from stages.ingest import CODE_VERSIONS

AC = dg.AutomationCondition

# Rebuild the index whenever signatures change and none are being computed. Unlike
# eager(), one registered shard without signatures (failed, or still queued) does not
# block the rebuild: the asset leaves such shards out and says so.
INDEX_CONDITION = (
    AC.any_deps_updated().since_last_handled() & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("signatures updated")

# A shard's deduped output follows the index, not its own filtered_documents: reacting to
# the latter would race the index rebuild that the same update triggers.
DEDUPED_CONDITION = (
    AC.any_deps_updated().ignore(dg.AssetSelection.assets("filtered_documents")).since_last_handled()
    & ~AC.any_deps_missing() & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("dedup_index updated")


@dg.asset(partitions_def=shards, deps=[filtered_documents], code_version=CODE_VERSIONS["minhash_signatures"],
          group_name="data", kinds={"parquet"})
def minhash_signatures(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """MinHash of word 5-grams (112 = 14 bands x 8 rows) and paragraph hashes per document."""
    store = settings.store()
    stats = minhash_stage(store, context.partition_key, settings.data_config())
    return stage_result(stats, store.part("minhash_signatures", context.partition_key))


@dg.asset(deps=[minhash_signatures], code_version=CODE_VERSIONS["dedup_index"], group_name="data",
          kinds={"parquet"}, automation_condition=INDEX_CONDITION)
def dedup_index(context: dg.AssetExecutionContext, settings: YunqueSettings,
                corpus: CorpusStorage) -> dg.MaterializeResult:
    """LSH clusters across every shard (keeper: smallest doc_id) and repeated paragraphs.
    Only shards that are still in the corpus take part: a vanished shard's documents must
    not keep (or drop) anyone."""
    store = settings.store()
    chosen = consumed_shards(context, settings, corpus, "minhash_signatures")
    pending = sorted(chosen.pending)
    if pending:
        context.log.warning(f"shards without signatures yet, left out of the index: {pending}")
    if not chosen.ready:
        raise dg.Failure(f"no shard has minhash_signatures yet (waiting: {pending}, gone from the corpus: "
                         f"{chosen.gone})")
    stats = dedup_index_stage(store, chosen.ready, settings.data_config())
    return stage_result(stats, None, None, path=dg.MetadataValue.path(str(store.dir("dedup_index"))),
                        pending_shards=dg.MetadataValue.json(pending))


@dg.asset(partitions_def=shards, deps=[filtered_documents, dedup_index],
          code_version=CODE_VERSIONS["deduped_documents"], group_name="data", kinds={"parquet"},
          automation_condition=DEDUPED_CONDITION)
def deduped_documents(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """The shard's kept documents: filtered minus near-duplicates and repeated paragraphs.
    Always a materialization when it succeeds, with zero rows if nothing is left to keep
    (a backfill counts a partition that yields nothing as failed, with everything
    downstream). If the index does not cover the shard's current signatures, the step
    fails and says what to materialize first."""
    store = settings.store()
    shard = context.partition_key
    try:
        stats = deduped_stage(store, shard, settings.data_config())
    except StaleIndexError as e:
        raise dg.Failure(
            description=f"deduped_documents[{shard}]: the dedup index does not cover this shard's current "
                        f"documents ({e}). Materialize minhash_signatures[{shard}], then dedup_index, then this "
                        "partition again (the automation sensor does it in that order).",
            metadata={"shard": shard, "reason": str(e)},
            allow_retries=False,  # a retry finds the same index; the index's rebuild requests this again
        ) from e
    if stats.docs_out == 0:
        context.log.warning(f"{shard}: no document left to keep after dedup ({stats.docs_in} in, "
                            f"drops {stats.drops}); materialized with zero rows")
    return stage_result(stats, store.part("deduped_documents", shard), store.rejected(shard, "dedup"))
