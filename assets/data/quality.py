"""quality_model (whole corpus): the learned quality signal, trained on the corpus as
filtered and scoring every shard; deduped_documents drops what it scores below its
threshold (stages.data.quality)."""

import dagster as dg

from assets.conditions import changed_deps, no_dep_requested
from assets.partitions import consumed_shards
from resources import CorpusStorage, YunqueSettings
from stages.store.versions import CODE_VERSIONS

AC = dg.AutomationCondition

# Like dedup_index's: rescore when filtered documents change and none are being computed.
QUALITY_CONDITION = (
    changed_deps().since_last_handled() & no_dep_requested() & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("filtered documents changed")


@dg.asset(deps=[dg.AssetKey("filtered_documents")], code_version=CODE_VERSIONS["quality_model"], group_name="data",
          kinds={"fasttext"}, automation_condition=QUALITY_CONDITION)
def quality_model(context: dg.AssetExecutionContext, settings: YunqueSettings,
                  corpus: CorpusStorage) -> dg.MaterializeResult:
    """A fastText classifier of good text, trained on this corpus (nothing downloaded):
    positives are the documents every rule keeps (and `filters.learned.good_examples`),
    negatives corruptions of the positives (shuffled words, cut-up lines, sentences of the
    corpus' other-language pages mixed in). It scores every filtered document; below the
    calibrated threshold, deduped_documents drops it as `learned_quality:score`. The
    metadata shows the score histogram with the threshold and what the held-out part says
    it catches and costs. Retrained when its settings or the rules change, or the corpus
    doubles; otherwise new shards are only scored."""
    from assets.metadata import quality_metadata, stage_result
    from stages.data.quality import quality_stage

    store, cfg = settings.store(), settings.data_config()
    chosen = consumed_shards(context, settings, corpus, "filtered_documents")
    if chosen.pending:
        context.log.warning(f"shards without filtered documents yet, left out: {sorted(chosen.pending)}")
    if not chosen.ready:
        raise dg.Failure(f"no shard has filtered_documents yet (waiting: {sorted(chosen.pending)})")
    stats = quality_stage(store, chosen.ready, cfg)
    if off := stats.extra.get("off_because"):
        context.log.info(f"the learned quality signal is off for this corpus: {off}")
    return stage_result(stats, None, None, path=dg.MetadataValue.path(str(store.dir("quality_model"))),
                        **quality_metadata(stats))
