"""The code version of each data stage, in a module that imports nothing: the asset
definitions read it when the code location loads, long before any stage runs.

Bump a stage's version when its logic changes: it is part of the stage's cache key and
its Dagster code_version, so the UI marks downstream materializations stale."""

CODE_VERSIONS = {
    "raw_documents": "1",
    "clean_documents": "1",
    # 2: per-document rule metrics (filter_metrics.parquet), resolved profile; 3: language ID
    # reads the first max_chars characters after folding whitespace, not before
    "filtered_documents": "3",
    "minhash_signatures": "3",  # 3: affine32 signatures, columnar per-band index
    "dedup_index": "3",
    "deduped_documents": "3",
    "tokenizer": "1",
    "token_shards": "1",
    "eval_contamination": "1",
}
