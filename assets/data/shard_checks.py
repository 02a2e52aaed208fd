"""The checks the data chain carries for each shard: filtered_documents' language (a WARN
when most of a shard is in another language), and deduped_documents' nothing lost
(blocking) and language purity. They are the assets' own check specs, evaluated per shard
inside their batch steps (`assets.batch`), since a separate check step over a range of
shards could not report a result per shard.

Each says in its `description` what passing means; its result says in words what was
found (a failure starts with FAILED) and its metadata names what failed."""

import warnings

import dagster as dg

from assets.partitions import shards
from stages.asset_names import DEDUPED_DOCUMENTS

# Partitioned asset checks are a Dagster preview feature; we rely on it knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

ASSET = DEDUPED_DOCUMENTS
PURITY_SAMPLE = 500  # changed kept texts that fastText labels again, at most
PURITY_SHARE = 0.95  # of them that must come out in the target language
EXAMPLES = 10

EVERY_DOCUMENT_ONCE = dg.AssetCheckSpec(
    "every_document_once", asset=ASSET, partitions_def=shards, blocking=True,
    description="Passes when every document read from the shard (raw_documents and the read rejections) appears "
                "exactly once across deduped_documents and the rejections of every stage: none lost, none counted "
                "twice, none from elsewhere. Blocking: a failure fails the run's step, after the batch's other "
                "shards are done.",
)
LANGUAGE_IS_PURE = dg.AssetCheckSpec(
    "language_is_pure", asset=ASSET, partitions_def=shards,
    description=f"Passes when every kept document carries the target language (langid.language) and fastText "
                f"labels at least {PURITY_SHARE:.0%} of the final texts that changed since language ID read them "
                f"(a quality rule or paragraph dedup cut lines within its first langid.max_chars characters; up "
                f"to {PURITY_SAMPLE}) as that language again. An unchanged text keeps the label the filter gave "
                "it. A shard with no kept documents passes.",
)
SPECS = [EVERY_DOCUMENT_ONCE, LANGUAGE_IS_PURE]

IN_CORPUS_LANGUAGE = dg.AssetCheckSpec(
    "in_corpus_language", asset="filtered_documents", partitions_def=shards,
    description="Passes unless language ID dropped most of the shard (half or more) as another language than the "
                "run's (`language`). A WARN, not a failure: a shard of another language in a mixed corpus is "
                "dropped as it should be, but a whole corpus in another language means the run is set for the "
                "wrong one. The result names the language fastText found.",
)


def in_corpus_language(store, shard: str, cfg) -> dg.AssetCheckResult:
    from stages.data.audit import language_finding

    found = language_finding(store, shard, cfg.langid.language)
    if found is None:
        return dg.AssetCheckResult(passed=True, description=f"shard {shard} has not been filtered")
    md = {"documents": found.documents, "other_language": found.other_language, "share": round(found.share, 4),
          "language_found": found.found, "language": found.target}
    if not found.mostly_other:
        return dg.AssetCheckResult(passed=True, description=found.line(), metadata=md)
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=md,
                               description=f"WARN {found.line()}; if the corpus is in {found.found}, run "
                                           f"`yunque run --language {found.found}` on a new home")


def every_document_once(store, shard: str) -> dg.AssetCheckResult:
    from stages.data.audit import exactly_once

    acc = exactly_once(store, shard)
    if acc.ok:
        text = f"all {acc.read} documents read are accounted for once: {acc.kept} kept, {acc.rejected} rejected"
    else:
        problems = [f"{what}: {', '.join(ids)}" for what, ids in (
            ("read but neither kept nor rejected", acc.missing), ("kept or rejected more than once", acc.duplicated),
            ("kept or rejected but never read", acc.unknown)) if ids]
        text = f"FAILED for shard {shard}: " + "; ".join(problems) + " (up to 20 ids each)"
    return dg.AssetCheckResult(
        passed=acc.ok, description=text,
        metadata={"read": acc.read, "kept": acc.kept, "rejected": acc.rejected,
                  "missing_doc_ids": dg.MetadataValue.json(acc.missing),
                  "duplicated_doc_ids": dg.MetadataValue.json(acc.duplicated),
                  "unknown_doc_ids": dg.MetadataValue.json(acc.unknown)},
    )


def language_is_pure(store, shard: str, cfg) -> dg.AssetCheckResult:
    from stages.data.audit import language_purity

    lid = cfg.langid
    p = language_purity(store, shard, lid.language, sample=PURITY_SAMPLE, max_chars=lid.max_chars)
    passed = p.labelled_other == 0 and p.redetected_target >= PURITY_SHARE
    md = {"kept": p.checked, "labelled_other": p.labelled_other, "relabelled": p.relabelled,
          "redetected_target_share": round(p.redetected_target, 4), "required_share": PURITY_SHARE,
          "language": lid.language}
    again = (f"fastText labels {p.redetected_target:.1%} of the {p.relabelled} texts changed since language ID "
             f"{lid.language}" if p.relabelled else "no kept text changed since language ID labelled it")
    if passed:
        text = f"all {p.checked} kept documents are labelled {lid.language}; {again}"
    else:
        text = (f"FAILED for shard {shard}: {p.labelled_other} kept documents labelled with another language; "
                f"{again} (required {PURITY_SHARE:.0%}); see impure_examples")
        md["impure_examples"] = dg.MetadataValue.json(_impure_examples(store, shard, lid.language, p))
    return dg.AssetCheckResult(passed=passed, description=text, metadata=md)


def _impure_examples(store, shard: str, language: str, p) -> list[dict]:
    """Kept documents labelled with another language, then the changed texts that
    fastText no longer labels as the target (only read when the check fails)."""
    import pyarrow.parquet as pq

    t = pq.read_table(store.part(ASSET, shard), columns=["doc_id", "source", "lang"])
    out = [{"doc_id": d, "source": src, "stored_lang": lang, "detected": None}
           for d, src, lang in zip(t["doc_id"].to_pylist(), t["source"].to_pylist(), t["lang"].to_pylist())
           if lang != language][:EXAMPLES]
    out += [{"doc_id": d, "source": src, "stored_lang": lang, "detected": f"{label} ({prob:.2f})"}
            for d, src, lang, label, prob in p.off_target[:EXAMPLES - len(out)]]
    return out
