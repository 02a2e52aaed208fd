"""The per-shard document chain: raw_documents, clean_documents, filtered_documents and
minhash_signatures, four assets computed by one step over a batch of shards
(`assets.batch`): each shard goes through the selected stages in order, and each stage's
output is reported for that shard as soon as it is committed."""


from collections.abc import Iterator

import dagster as dg

from assets.batch import POLICY, Event, ShardEvents, each_shard
from assets.data import shard_checks
from assets.partitions import shards
from resources import CorpusStorage, YunqueSettings
from stages.asset_names import (
    CLEAN_DOCUMENTS,
    FILTERED_DOCUMENTS,
    MINHASH_SIGNATURES,
    RAW_DOCUMENTS,
)
from stages.store.versions import CODE_VERSIONS

RAW, CLEAN, FILTERED, SIGNATURES = RAW_DOCUMENTS, CLEAN_DOCUMENTS, FILTERED_DOCUMENTS, MINHASH_SIGNATURES
STEPS = (RAW, CLEAN, FILTERED, SIGNATURES)  # the assets of one shard_documents step, in order

DESCRIPTIONS = {
    RAW: "Documents of one shard (html, txt, md, jsonl, parquet, gz/zst/bz2; local or s3). Unreadable files and "
         "records become rejections with the file, line and reason. The metadata carries the shard's `fingerprint` "
         "(its files' names, sizes and versions: mtime on disk, ETag on S3).",
    CLEAN: "HTML to text with boilerplate removal, mojibake repair, Unicode normalisation.",
    FILTERED: "Documents in the target language that pass every quality rule, personal data replaced by typed "
              "placeholders (`<EMAIL>`, `<PHONE>`, ...; `pii/<kind>` counts per shard, never values); each rejected "
              "one is kept in "
              "rejected_documents with its rule. The materialization shows, per rule, a text histogram of its "
              "metric with the threshold (`yunque inspect filters --plot DIR` draws them as PNGs), kept and "
              "dropped counts, and a sample of the documents it rejected (`yunque inspect rejected` prints the "
              "same sample).",
    SIGNATURES: "MinHash of word 5-grams (112 = 14 bands x 8 rows) and paragraph hashes per document.",
}


def _spec(asset: str, parent: str | None) -> dg.AssetSpec:
    return dg.AssetSpec(asset, deps=[parent] if parent else [], description=DESCRIPTIONS[asset], partitions_def=shards,
                        code_version=CODE_VERSIONS[asset], group_name="data", kinds={"parquet"}, skippable=True)


@dg.multi_asset(specs=[_spec(a, p) for a, p in zip(STEPS, (None, *STEPS[:-1]))], can_subset=True,
                backfill_policy=POLICY, name="shard_documents", check_specs=[shard_checks.IN_CORPUS_LANGUAGE])
def shard_documents(context: dg.AssetExecutionContext, corpus: CorpusStorage,
                    settings: YunqueSettings) -> Iterator[object]:
    """Read, clean, filter and sign each shard of the run (the selected stages of the four)."""
    from assets.metadata import filter_report_metadata, pii_metadata, stage_metadata
    from stages.data.dedup import minhash_stage
    from stages.data.ingest import clean_stage, filter_stage, read_stage
    from stages.reports.filters.report import shard_report

    selected = [a for a in STEPS if dg.AssetKey(a) in context.selected_asset_keys]
    store, cfg = settings.store(), settings.data_config()
    source = corpus.open() if RAW in selected else None
    events = ShardEvents(context)
    reported: dict[tuple[str, str], str] = {}
    hiding: list = []  # the redactor, built when a preview first needs it

    def hide(text: str) -> str:  # the previews of raw and clean documents, which hold the corpus as read
        if not hiding:
            from stages.data.personal_data import redactor

            hiding.append(redactor(cfg))
        return hiding[0].redact(text).text
  # (asset, shard) -> the data version this step reported
    check_language = shard_checks.IN_CORPUS_LANGUAGE.key in context.selected_asset_check_keys

    def report(asset: str, shard: str, stats, **extra) -> dg.AssetMaterialization:
        parent = STEPS[STEPS.index(asset) - 1] if asset != RAW else None
        known = {parent: reported[parent, shard]} if (parent, shard) in reported else None
        rejected = {RAW: "read", CLEAN: "clean", FILTERED: "filter"}.get(asset)
        md = stage_metadata(stats, store.part(asset, shard), store.rejected(shard, rejected) if rejected else None,
                            redact=hide if asset in (RAW, CLEAN) else None, **extra)
        reported[asset, shard] = stats.key
        return events.materialization(asset, shard, md, stats.key, CODE_VERSIONS[asset],
                                      {parent: shard} if parent else {}, known)

    def one(shard: str) -> Iterator[Event]:
        if RAW in selected:
            info = corpus.shard(shard)
            stats = read_stage(store, source[0], source[1], info, cfg)
            if stats.rejected:
                context.log.warning(f"{shard}: {stats.rejected} unreadable files/records: {stats.drops}")
            # The shard sensor compares this with the corpus as listed now: a shard read with
            # its current files is not requested again, whoever materialized it.
            yield report(RAW, shard, stats, corpus=corpus.uri, fingerprint=dg.MetadataValue.text(info.fingerprint))
        if CLEAN in selected:
            yield report(CLEAN, shard, clean_stage(store, shard, cfg))
        if FILTERED in selected:
            stats = filter_stage(store, shard, cfg)
            found = shard_report(store, shard)
            yield report(FILTERED, shard, stats, **pii_metadata(stats),
                         **(filter_report_metadata(found) if found is not None else {}))
            if check_language:
                yield from events.checks(FILTERED, shard, [
                    ("in_corpus_language", shard_checks.in_corpus_language(store, shard, cfg), False)])
        if SIGNATURES in selected:
            yield report(SIGNATURES, shard, minhash_stage(store, shard, cfg))

    yield from each_shard(context, one)
