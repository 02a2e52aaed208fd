"""Asset checks: nothing lost, language purity, no near-duplicates left."""

import warnings

import dagster as dg

from assets.dedup import dedup_index, deduped_documents
from assets.partitions import consumed_shards, shards
from resources import CorpusStorage, YunqueSettings
from stages.audit import exactly_once, language_purity
from stages.dedup import near_duplicate_sample_pairs

# Partitioned asset checks are a Dagster preview feature; we rely on it knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


@dg.asset_check(asset=deduped_documents, partitions_def=shards, blocking=True)
def every_document_once(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    """Each document read from the shard is either kept or rejected, exactly once."""
    acc = exactly_once(settings.store(), context.partition_key)
    return dg.AssetCheckResult(
        passed=acc.ok,
        metadata={"read": acc.read, "kept": acc.kept, "rejected": acc.rejected,
                  "missing": dg.MetadataValue.json(acc.missing), "duplicated": dg.MetadataValue.json(acc.duplicated),
                  "unknown": dg.MetadataValue.json(acc.unknown)},
    )


@dg.asset_check(asset=deduped_documents, partitions_def=shards)
def language_is_pure(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    """Every kept document carries the target language, and fastText still says so for at
    least 95% of a sample of the final (paragraph-deduped) texts."""
    cfg = settings.data_config().langid
    p = language_purity(settings.store(), context.partition_key, cfg.language, max_chars=cfg.max_chars)
    return dg.AssetCheckResult(
        passed=p.labelled_other == 0 and p.redetected_target >= 0.95,
        metadata={"kept": p.checked, "labelled_other": p.labelled_other,
                  "redetected_target_share": round(p.redetected_target, 4), "language": cfg.language},
    )


@dg.asset_check(asset=dedup_index)
def no_near_duplicates_left(context: dg.AssetCheckExecutionContext, settings: YunqueSettings,
                            corpus: CorpusStorage) -> dg.AssetCheckResult:
    """No pair in a random sample of kept documents has estimated Jaccard >= check_jaccard."""
    cfg = settings.data_config()
    ready = consumed_shards(context, settings, corpus, "minhash_signatures").ready
    sampled, pairs = near_duplicate_sample_pairs(settings.store(), ready, cfg)
    return dg.AssetCheckResult(
        passed=not pairs,
        metadata={"sampled": sampled, "threshold": cfg.dedup.check_jaccard, "pairs": len(pairs),
                  "examples": dg.MetadataValue.json([list(p) for p in pairs[:10]])},
    )
