import dagster as dg

# The per-shard half of the graph (read -> signatures). dedup_index and
# deduped_documents follow through their eager automation conditions.
PER_SHARD = ["raw_documents", "clean_documents", "filtered_documents", "minhash_signatures"]

shard_job = dg.define_asset_job(
    "shard_job", selection=dg.AssetSelection.assets(*PER_SHARD),
    description="Read, clean, filter and sign shards (one step over a batch of shards).",
)
dedup_job = dg.define_asset_job(
    "dedup_job", selection=dg.AssetSelection.assets("dedup_index"),
    description="Rebuild the whole-corpus dedup index.",
)
