"""The dedup index's check: no near-duplicates left. (The per-shard checks of
deduped_documents are its own check specs: `assets.data.shard_checks`.)

It says in its `description` what passing means; its result says in words what was found
(a failure starts with FAILED) and its metadata names what failed."""

import warnings

import dagster as dg

from assets.data.dedup import dedup_index
from assets.partitions import consumed_shards
from resources import CorpusStorage, YunqueSettings

# Partitioned asset checks are a Dagster preview feature; we rely on it knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

EXAMPLES = 10


@dg.asset_check(
    asset=dedup_index,
    description="Passes when no pair in a random sample of kept documents (dedup.check_sample_size, across all "
                "consumed shards) has an estimated Jaccard similarity >= dedup.check_jaccard: the index left no "
                "near-duplicates behind.",
)
def no_near_duplicates_left(context: dg.AssetCheckExecutionContext, settings: YunqueSettings,
                            corpus: CorpusStorage) -> dg.AssetCheckResult:
    from stages.data.dedup import near_duplicate_sample_pairs

    cfg = settings.data_config()
    threshold = cfg.dedup.check_jaccard
    ready = consumed_shards(context, settings, corpus, "minhash_signatures").ready
    sampled, pairs = near_duplicate_sample_pairs(settings.store(), ready, cfg)
    if not pairs:
        text = f"no near-duplicate pair among {sampled} sampled kept documents (Jaccard >= {threshold})"
    else:
        a, b, est = pairs[0]
        text = (f"FAILED: {len(pairs)} pairs among {sampled} sampled kept documents have estimated Jaccard >= "
                f"{threshold}, e.g. {a} and {b} ({est:.2f}); see pairs_found")
    return dg.AssetCheckResult(
        passed=not pairs, description=text,
        metadata={"sampled": sampled, "threshold": threshold, "pairs": len(pairs),
                  "pairs_found": dg.MetadataValue.json([{"doc_id_a": a, "doc_id_b": b,
                                                         "estimated_jaccard": round(float(e), 4)}
                                                        for a, b, e in pairs[:EXAMPLES]])},
    )
