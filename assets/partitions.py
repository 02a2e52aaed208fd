import dagster as dg

# One partition per corpus shard (a subdirectory or single file at the corpus root).
# Keys are registered by the shard sensor or by `yunque run`.
shards = dg.DynamicPartitionsDefinition(name="shards")
