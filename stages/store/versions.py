"""The code version of each data stage, in a module that imports nothing: the asset
definitions read it when the code location loads, long before any stage runs.

Bump a stage's version when its logic changes: it is part of the stage's cache key and
its Dagster code_version, so the UI marks downstream materializations stale."""

CODE_VERSIONS = {
    "raw_documents": "3",  # 2: rejections' text redacted (personal data); 3: csv/tsv, record mapping
    "clean_documents": "2",  # 2: rejections' text redacted (personal data)
    # 2: per-document rule metrics (filter_metrics.parquet), resolved profile; 3: language ID
    # reads the first max_chars characters after folding whitespace, not before; 4: personal
    # data redacted first, pii_counts.parquet
    "filtered_documents": "4",
    "minhash_signatures": "3",  # 3: affine32 signatures, columnar per-band index
    "dedup_index": "3",
    "quality_model": "1",
    "deduped_documents": "4",  # 4: drops what quality_model scores below its threshold
    "tokenizer": "2",  # 2: the personal-data placeholders are tokens (ids 9-16)
    "token_shards": "1",
    "eval_contamination": "1",
}
