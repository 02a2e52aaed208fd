"""dedup_index (whole corpus) and deduped_documents (per shard, in batches)."""

from collections.abc import Iterator

import dagster as dg

from assets.batch import LIGHT_POLICY, Event, ShardEvents, each_shard
from assets.conditions import changed_deps, no_dep_requested
from assets.data import shard_checks
from assets.partitions import consumed_shards, shards
from resources import CorpusStorage, YunqueSettings
from stages.asset_names import MINHASH_SIGNATURES
from stages.store.versions import CODE_VERSIONS

AC = dg.AutomationCondition

# Rebuild the index whenever signatures change and none are being computed. Unlike
# eager(), one registered shard without signatures (failed, or still queued) does not
# block the rebuild: the asset leaves such shards out and says so.
INDEX_CONDITION = (
    changed_deps().since_last_handled() & no_dep_requested() & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("signatures changed")

# A shard's deduped output follows the index, not its own filtered_documents: reacting to
# the latter would race the index rebuild that the same update triggers.
DEDUPED_CONDITION = (
    changed_deps(ignore=("filtered_documents",)).since_last_handled() & no_dep_requested()
    & ~AC.any_deps_missing() & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("dedup_index or quality_model changed")

SIGNATURES = dg.AssetKey(MINHASH_SIGNATURES)


@dg.asset(deps=[SIGNATURES], code_version=CODE_VERSIONS["dedup_index"], group_name="data",
          kinds={"parquet"}, automation_condition=INDEX_CONDITION)
def dedup_index(context: dg.AssetExecutionContext, settings: YunqueSettings,
                corpus: CorpusStorage) -> dg.MaterializeResult:
    """LSH clusters across every shard (keeper: smallest doc_id) and repeated paragraphs.
    Only shards that are still in the corpus take part: a vanished shard's documents must
    not keep (or drop) anyone."""
    from assets.metadata import stage_result
    from stages.data.dedup import dedup_index_stage

    store = settings.store()
    chosen = consumed_shards(context, settings, corpus, "minhash_signatures")
    pending = sorted(chosen.pending)
    if pending:
        context.log.warning(f"shards without signatures yet, left out of the index: {pending}")
    if not chosen.ready:
        raise dg.Failure(f"no shard has minhash_signatures yet (waiting: {pending}, gone from the corpus: "
                         f"{chosen.gone})")
    cfg = settings.data_config()
    from stages.data.audit import empty_corpus_cause

    if cause := empty_corpus_cause(store, chosen.ready, cfg.langid.language):
        raise dg.Failure(cause)  # a data half that keeps nothing never ends as a success
    stats = dedup_index_stage(store, chosen.ready, cfg)
    return stage_result(stats, None, None, path=dg.MetadataValue.path(str(store.dir("dedup_index"))),
                        pending_shards=dg.MetadataValue.json(pending), **_personal_data(store, chosen.ready, cfg))


def _personal_data(store, shards: list[str], cfg) -> dict[str, object]:
    """The corpus' personal-data totals (a table, `pii_total/<kind>` numbers) and a per-shard plot."""
    import tempfile
    from dataclasses import asdict
    from pathlib import Path

    from assets.metadata import image
    from stages.reports.personal_data import corpus_pii, plot

    found = corpus_pii(store, shards)
    md: dict[str, object] = {"personal_data": dg.MetadataValue.md(found.markdown(asdict(cfg.pii))),
                             **{f"pii_total/{k}": n for k, n in found.totals.items()}}
    with tempfile.TemporaryDirectory() as tmp:  # the PNG lives on in the metadata, inlined
        if (png := plot(found, Path(tmp) / "pii.png")) is not None:
            md["personal_data_per_shard"] = image(png, "personal data per shard")
    return md


@dg.asset(partitions_def=shards, deps=[dg.AssetKey("filtered_documents"), dedup_index, dg.AssetKey("quality_model")],
          code_version=CODE_VERSIONS["deduped_documents"], group_name="data", kinds={"parquet"},
          automation_condition=DEDUPED_CONDITION, backfill_policy=LIGHT_POLICY, output_required=False,
          check_specs=shard_checks.SPECS)
def deduped_documents(context: dg.AssetExecutionContext, settings: YunqueSettings) -> Iterator[object]:
    """The shard's kept documents: filtered minus what quality_model scores below its
    threshold, near-duplicates and repeated paragraphs.
    In batches four times the chain's (`assets.batch.LIGHT_POLICY`: light work per shard,
    and a policy other than its parent's and child's keeps Dagster from putting it in
    their runs, where it would wait on outputs a batch step does not yield).
    Always a materialization when it succeeds, with zero rows if nothing is left to keep
    (a backfill counts a partition that yields nothing as failed, with everything
    downstream). If the index does not cover the shard's current signatures, the shard
    fails and says what to materialize first."""
    from assets.metadata import stage_metadata
    from stages.data.dedup import StaleIndexError, deduped_stage
    from stages.data.quality import StaleQualityError

    store, cfg = settings.store(), settings.data_config()
    checks = {spec.name: spec for spec in shard_checks.SPECS
              if spec.key in context.selected_asset_check_keys}
    events = ShardEvents(context)

    def one(shard: str) -> Iterator[Event]:
        try:
            stats = deduped_stage(store, shard, cfg)
        except StaleIndexError as e:
            raise dg.Failure(
                f"deduped_documents[{shard}]: the dedup index does not cover this shard's current documents ({e}). "
                "Materialize "
                f"minhash_signatures[{shard}], then dedup_index, then this partition again (the automation sensor "
                "does it in that order).") from e
        except StaleQualityError as e:
            raise dg.Failure(f"deduped_documents[{shard}]: {e} (the automation sensor does it after "
                             f"filtered_documents[{shard}]), then this partition again.") from e
        if stats.docs_out == 0:
            context.log.warning(f"{shard}: no document left to keep after dedup ({stats.docs_in} in, "
                                f"drops {stats.drops}); materialized with zero rows")
        md = stage_metadata(stats, store.part("deduped_documents", shard), store.rejected(shard, "dedup"))
        yield events.materialization("deduped_documents", shard, md, stats.key, CODE_VERSIONS["deduped_documents"],
                                     {"filtered_documents": shard, "dedup_index": None, "quality_model": None})
        results = []
        if "every_document_once" in checks:
            results.append(("every_document_once", shard_checks.every_document_once(store, shard), True))
        if "language_is_pure" in checks:
            results.append(("language_is_pure", shard_checks.language_is_pure(store, shard, cfg), False))
        yield from events.checks("deduped_documents", shard, results)

    yield from each_shard(context, one)

