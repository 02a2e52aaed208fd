"""Asset checks: nothing lost, language purity, no near-duplicates left.

Each says in its `description` what passing means; its result says in words what was
found (a failure starts with FAILED) and its metadata names what failed."""

import warnings

import dagster as dg
import pyarrow.parquet as pq

from assets.dedup import dedup_index, deduped_documents
from assets.partitions import consumed_shards, shards
from pipelines.data.langid import detect
from resources import CorpusStorage, YunqueSettings
from stages.audit import exactly_once, language_purity
from stages.dedup import near_duplicate_sample_pairs
from stages.store import DataStore

# Partitioned asset checks are a Dagster preview feature; we rely on it knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

PURITY_SAMPLE = 500  # kept documents that fastText labels again
PURITY_SHARE = 0.95  # of them that must come out in the target language
EXAMPLES = 10


@dg.asset_check(
    asset=deduped_documents, partitions_def=shards, blocking=True,
    description="Passes when every document read from the shard (raw_documents and the read rejections) "
                "appears exactly once across deduped_documents and the rejections of every stage: none lost, "
                "none counted twice, none from elsewhere. Blocking: a failure stops what follows in the run.",
)
def every_document_once(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    acc = exactly_once(settings.store(), context.partition_key)
    if acc.ok:
        text = f"all {acc.read} documents read are accounted for once: {acc.kept} kept, {acc.rejected} rejected"
    else:
        problems = [f"{what}: {', '.join(ids)}" for what, ids in (
            ("read but neither kept nor rejected", acc.missing), ("kept or rejected more than once", acc.duplicated),
            ("kept or rejected but never read", acc.unknown)) if ids]
        text = f"FAILED for shard {context.partition_key}: " + "; ".join(problems) + " (up to 20 ids each)"
    return dg.AssetCheckResult(
        passed=acc.ok, description=text,
        metadata={"read": acc.read, "kept": acc.kept, "rejected": acc.rejected,
                  "missing_doc_ids": dg.MetadataValue.json(acc.missing),
                  "duplicated_doc_ids": dg.MetadataValue.json(acc.duplicated),
                  "unknown_doc_ids": dg.MetadataValue.json(acc.unknown)},
    )


def _impure_examples(store: DataStore, shard: str, language: str, max_chars: int) -> list[dict]:
    """Kept documents labelled with another language, then those of the sample that
    fastText no longer labels as the target (only computed when the check fails)."""
    t = pq.read_table(store.part("deduped_documents", shard), columns=["doc_id", "source", "text", "lang"])
    rows = t.to_pylist()
    out = [{"doc_id": r["doc_id"], "source": r["source"], "stored_lang": r["lang"], "detected": None}
           for r in rows if r["lang"] != language][:EXAMPLES]
    sample = rows[:PURITY_SAMPLE]
    for r, (lang, p) in zip(sample, detect([r["text"] for r in sample], max_chars)):
        if lang != language and len(out) < EXAMPLES:
            out.append({"doc_id": r["doc_id"], "source": r["source"], "stored_lang": r["lang"],
                        "detected": f"{lang} ({p:.2f})"})
    return out


@dg.asset_check(
    asset=deduped_documents, partitions_def=shards,
    description=f"Passes when every kept document carries the target language (langid.language) and fastText "
                f"labels at least {PURITY_SHARE:.0%} of a sample of {PURITY_SAMPLE} final (paragraph-deduped) "
                "texts as that language again. A shard with no kept documents passes.",
)
def language_is_pure(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    cfg = settings.data_config().langid
    store, shard = settings.store(), context.partition_key
    p = language_purity(store, shard, cfg.language, sample=PURITY_SAMPLE, max_chars=cfg.max_chars)
    passed = p.labelled_other == 0 and p.redetected_target >= PURITY_SHARE
    md = {"kept": p.checked, "labelled_other": p.labelled_other,
          "redetected_target_share": round(p.redetected_target, 4), "required_share": PURITY_SHARE,
          "language": cfg.language}
    if passed:
        text = (f"all {p.checked} kept documents are labelled {cfg.language}; fastText agrees on "
                f"{p.redetected_target:.1%} of the sample")
    else:
        text = (f"FAILED for shard {shard}: {p.labelled_other} kept documents labelled with another language; "
                f"fastText labels {p.redetected_target:.1%} of the sample {cfg.language} "
                f"(required {PURITY_SHARE:.0%}); see impure_examples")
        md["impure_examples"] = dg.MetadataValue.json(_impure_examples(store, shard, cfg.language, cfg.max_chars))
    return dg.AssetCheckResult(passed=passed, description=text, metadata=md)


@dg.asset_check(
    asset=dedup_index,
    description="Passes when no pair in a random sample of kept documents (dedup.check_sample_size, across all "
                "consumed shards) has an estimated Jaccard similarity >= dedup.check_jaccard: the index left no "
                "near-duplicates behind.",
)
def no_near_duplicates_left(context: dg.AssetCheckExecutionContext, settings: YunqueSettings,
                            corpus: CorpusStorage) -> dg.AssetCheckResult:
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
