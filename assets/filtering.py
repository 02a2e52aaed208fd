"""filtered_documents: fastText language ID and the Gopher / C4 / FineWeb quality rules."""

import tempfile
from pathlib import Path

import dagster as dg

from assets.ingest import clean_documents
from assets.metadata import filter_report_metadata, stage_result
from assets.partitions import shards
from resources import YunqueSettings
from stages.filter_report import shard_report
from stages.ingest import CODE_VERSIONS, filter_stage


@dg.asset(partitions_def=shards, deps=[clean_documents], code_version=CODE_VERSIONS["filtered_documents"],
          group_name="data", kinds={"parquet"})
def filtered_documents(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """Documents in the target language that pass every quality rule; each rejected one
    is kept in rejected_documents with its rule. The materialization shows, per rule, a
    histogram of its metric with the threshold, kept and dropped counts, and a sample of
    the documents it rejected (`yunque inspect rejected` prints the same sample)."""
    store = settings.store()
    shard = context.partition_key
    stats = filter_stage(store, shard, settings.data_config())
    extra = {}
    if (report := shard_report(store, shard)) is not None:
        with tempfile.TemporaryDirectory(prefix="filter-report.") as tmp:  # the PNGs are inlined
            extra = filter_report_metadata(report, Path(tmp))
    return stage_result(stats, store.part("filtered_documents", shard), store.rejected(shard, "filter"), **extra)
