"""filtered_documents: fastText language ID and the Gopher / C4 / FineWeb quality rules."""

import dagster as dg

from assets.ingest import clean_documents
from assets.metadata import stage_result
from assets.partitions import shards
from resources import YunqueSettings
from stages.ingest import CODE_VERSIONS, filter_stage


@dg.asset(partitions_def=shards, deps=[clean_documents], code_version=CODE_VERSIONS["filtered_documents"],
          group_name="data", kinds={"parquet"})
def filtered_documents(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """Documents in the target language that pass every quality rule; each rejected one
    is kept in rejected_documents with its rule."""
    store = settings.store()
    stats = filter_stage(store, context.partition_key, settings.data_config())
    return stage_result(stats, store.part("filtered_documents", context.partition_key),
                        store.rejected(context.partition_key, "filter"))
