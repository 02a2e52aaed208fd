import dagster as dg

from stages.asset_names import (
    CLEAN_DOCUMENTS,
    DEDUP_INDEX,
    FILTERED_DOCUMENTS,
    MINHASH_SIGNATURES,
    RAW_DOCUMENTS,
)

# The per-shard half of the graph (read -> signatures). dedup_index and
# deduped_documents follow through their eager automation conditions.
SHARD_JOB_ASSETS = [RAW_DOCUMENTS, CLEAN_DOCUMENTS, FILTERED_DOCUMENTS, MINHASH_SIGNATURES]

shard_job = dg.define_asset_job(
    "shard_job", selection=dg.AssetSelection.assets(*SHARD_JOB_ASSETS),
    description="Read, clean, filter and sign shards (one step over a batch of shards).",
)
dedup_job = dg.define_asset_job(
    "dedup_job", selection=dg.AssetSelection.assets(DEDUP_INDEX),
    description="Rebuild the whole-corpus dedup index.",
)
