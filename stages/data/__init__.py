"""The data stages as plain functions: read, clean, filter, dedup, tokenizer, token shards, the shard invariants, the up-to-date plan, and domain QA pairs."""
