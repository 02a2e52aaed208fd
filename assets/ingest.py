"""raw_documents and clean_documents: read a shard, then extract and normalise text."""

import dagster as dg

from assets.metadata import stage_result
from assets.partitions import shards
from resources import CorpusStorage, YunqueSettings
from stages.ingest import CODE_VERSIONS, clean_stage, read_stage


@dg.asset(partitions_def=shards, code_version=CODE_VERSIONS["raw_documents"], group_name="data",
          kinds={"parquet"})
def raw_documents(context: dg.AssetExecutionContext, corpus: CorpusStorage,
                  settings: YunqueSettings) -> dg.MaterializeResult:
    """Documents of one shard (html, txt, md, jsonl, parquet, gz/zst/bz2; local or s3).
    Unreadable files and records become rejections with the file, line and reason. The
    metadata carries the shard's `fingerprint` (its files' names, sizes and versions:
    mtime on disk, ETag on S3)."""
    shard = corpus.shard(context.partition_key)
    fs, root = corpus.open()
    store = settings.store()
    stats = read_stage(store, fs, root, shard, settings.data_config())
    if stats.rejected:
        context.log.warning(f"{shard.key}: {stats.rejected} unreadable files/records: {stats.drops}")
    # The shard sensor compares this with the corpus as listed now: a shard read with its
    # current files is not requested again, whoever materialized it.
    return stage_result(stats, store.part("raw_documents", shard.key), store.rejected(shard.key, "read"),
                        corpus=corpus.uri, fingerprint=dg.MetadataValue.text(shard.fingerprint))


@dg.asset(partitions_def=shards, deps=[raw_documents], code_version=CODE_VERSIONS["clean_documents"],
          group_name="data", kinds={"parquet"})
def clean_documents(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """HTML to text with boilerplate removal, mojibake repair, Unicode normalisation."""
    store = settings.store()
    stats = clean_stage(store, context.partition_key, settings.data_config())
    return stage_result(stats, store.part("clean_documents", context.partition_key),
                        store.rejected(context.partition_key, "clean"))
