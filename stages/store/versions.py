"""The code version of each data stage, in a module that imports only the asset names: the
asset definitions read it when the code location loads, long before any stage runs.

Bump a stage's version when its logic changes: it is part of the stage's cache key and
its Dagster code_version, so the UI marks downstream materializations stale."""

from stages.asset_names import (
    CLEAN_DOCUMENTS,
    DEDUP_INDEX,
    DEDUPED_DOCUMENTS,
    EVAL_CONTAMINATION,
    FILTERED_DOCUMENTS,
    MINHASH_SIGNATURES,
    QUALITY_MODEL,
    RAW_DOCUMENTS,
    TOKEN_SHARDS,
    TOKENIZER,
)

CODE_VERSIONS = {
    RAW_DOCUMENTS: "3",  # 2: rejections' text redacted (personal data); 3: csv/tsv, record mapping
    CLEAN_DOCUMENTS: "2",  # 2: rejections' text redacted (personal data)
    # 2: per-document rule metrics (filter_metrics.parquet), resolved profile; 3: language ID
    # reads the first max_chars characters after folding whitespace, not before; 4: personal
    # data redacted first, pii_counts.parquet
    FILTERED_DOCUMENTS: "4",
    MINHASH_SIGNATURES: "3",  # 3: affine32 signatures, columnar per-band index
    DEDUP_INDEX: "3",
    QUALITY_MODEL: "1",
    DEDUPED_DOCUMENTS: "4",  # 4: drops what quality_model scores below its threshold
    TOKENIZER: "2",  # 2: the personal-data placeholders are tokens (ids 9-16)
    TOKEN_SHARDS: "1",
    EVAL_CONTAMINATION: "1",
}
