"""token_shards (per shard): a shard's documents encoded with the current tokenizer into
the format of pipelines/tokens/token_format.py, memoised on the tokenizer hash, the split
settings and the shard's deduplicated documents."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.tokens.token_format import (
    FORMAT,
    HEADER,
    SPLITS,
    SplitWriter,
    TokenShard,
    TokenShardError,
    token_dtype,
)
from pipelines.tokens.tokenizer import DocumentEncoder, TokenizerError, is_validation, load_encoder
from stages.asset_names import TOKEN_SHARDS, TOKENIZER
from stages.config import YunqueConfig
from stages.data.tokenizer import SPLIT_FIELDS
from stages.store.keys import cache_key, upstream_key
from stages.store.outputs import READ_BATCH, DataStore, StageStats
from stages.store.versions import CODE_VERSIONS


def encoded_key(cfg: YunqueConfig, tokenizer_hash: str, deduped: str) -> str:
    """token_shards' key: the split settings, the tokenizer's hash and the shard's documents."""
    return cache_key(TOKEN_SHARDS, CODE_VERSIONS[TOKEN_SHARDS], cfg.section_hash("tokenizer", fields=SPLIT_FIELDS),
                     tokenizer_hash, deduped)


def token_shard_key(store: DataStore, shard: str, cfg: YunqueConfig) -> tuple[str, str]:
    m = store.manifest(TOKENIZER)
    if m is None:
        raise FileNotFoundError("the tokenizer has not been materialized yet")
    tok_hash = m["stats"]["extra"]["tokenizer_hash"]
    return encoded_key(cfg, tok_hash, upstream_key(store, "deduped_documents", shard)), tok_hash


def token_shard_stage(store: DataStore, shard: str, cfg: YunqueConfig) -> StageStats:
    t = cfg.tokenizer
    key, tok_hash = token_shard_key(store, shard, cfg)
    with store.lock(TOKEN_SHARDS, shard):
        if (hit := store.cached(TOKEN_SHARDS, shard, key)) and intact(store.dir(TOKEN_SHARDS, shard)):
            return hit
        enc = load_encoder(str(store.verified(TOKENIZER)), tok_hash)
        if enc.hash != tok_hash:
            raise TokenizerError(f"{store.dir(TOKENIZER)}: tokenizer.json changed under its manifest "
                                 f"({enc.hash} != {tok_hash}); re-materialize the tokenizer")
        dtype = token_dtype(enc.vocab_size)
        stats = StageStats(key=key)

        def encode_all(writers: dict[str, SplitWriter], encoder: DocumentEncoder) -> dict[str, list]:
            lineage: dict[str, list] = {"doc_id": [], "split": [], "index": []}
            pf = pq.ParquetFile(store.part("deduped_documents", shard))
            for batch in pf.iter_batches(batch_size=READ_BATCH, columns=["doc_id", "text"]):
                ids, texts = batch["doc_id"].to_pylist(), batch["text"].to_pylist()
                encoded = encoder.encode_arrays(texts, threads=os.cpu_count() or 1)
                if encoder.backend != "hf" and not _agrees_with_hf(encoder, texts[:SPOT_CHECK], encoded):
                    raise _EncoderMismatch()
                val = [is_validation(d, t.val_fraction, t.split_seed) for d in ids]
                for split in SPLITS:
                    pick = [i for i, v in enumerate(val) if v == (split == "val")]
                    w = writers[split]
                    lineage["doc_id"] += [ids[i] for i in pick]
                    lineage["split"] += [split] * len(pick)
                    lineage["index"] += range(w.documents, w.documents + len(pick))
                    w.add([encoded[i] for i in pick], sum(len(texts[i].encode()) for i in pick))
            return lineage

        def write(directory: Path) -> list[str]:
            nonlocal enc
            with contextlib.ExitStack() as stack:
                writers = {s: stack.enter_context(SplitWriter(directory, s, dtype, enc.eot_id)) for s in SPLITS}
                try:
                    lineage = encode_all(writers, enc)
                except _EncoderMismatch:
                    # tiktoken's merges disagree with the HF tokenizer on this shard's text:
                    # start over with HF (slower, the reference), and say so
                    stats.extra["encoder_fallback"] = True
                    enc = DocumentEncoder(store.dir(TOKENIZER), backend="hf")
                    for w in writers.values():
                        w.reset()
                    lineage = encode_all(writers, enc)
                splits = {s: w.close() for s, w in writers.items()}
            header = {"format": FORMAT, "dtype": dtype.str, "vocab_size": enc.vocab_size, "eot_id": enc.eot_id,
                      "tokenizer_hash": tok_hash, "encoder": enc.backend, "shard": shard, "splits": splits}
            (directory / HEADER).write_text(json.dumps(header, indent=1))
            pq.write_table(pa.table({"doc_id": pa.array(lineage["doc_id"], pa.string()),
                                     "split": pa.array(lineage["split"], pa.string()),
                                     "index": pa.array(lineage["index"], pa.int64())}),
                           directory / "documents.parquet")
            docs = sum(s["documents"] for s in splits.values())
            stats.docs_in = stats.docs_out = docs
            stats.bytes_in = sum(s["bytes"] for s in splits.values())
            stats.bytes_out = sum(s["tokens"] for s in splits.values()) * dtype.itemsize
            stats.extra.update(tokens=sum(s["tokens"] for s in splits.values()), dtype=str(dtype),
                               train_tokens=splits["train"]["tokens"], val_tokens=splits["val"]["tokens"],
                               train_documents=splits["train"]["documents"], val_documents=splits["val"]["documents"],
                               tokenizer_hash=tok_hash)
            return ["header.json", "documents.parquet", *(f"{s}.{x}" for s in SPLITS for x in ("bin", "idx"))]

        store.commit(TOKEN_SHARDS, shard, stats, {}, write=write)
        return stats


def intact(directory: Path) -> bool:
    try:
        TokenShard.open(directory).verify()
        return True
    except TokenShardError:
        return False


SPOT_CHECK = 8  # documents per batch whose ids are compared with the HF tokenizer's


class _EncoderMismatch(Exception):
    pass


def _agrees_with_hf(encoder: DocumentEncoder, texts: list[str], encoded: list) -> bool:
    ref = encoder.hf.encode_batch_fast(texts, add_special_tokens=False)
    return all(list(a) == r.ids for a, r in zip(encoded, ref))


def corpus_tokens(store: DataStore, shards: Sequence[str]) -> dict[str, int]:
    """Train/val tokens over the shards encoded with the current tokenizer (for the size
    verdict; shards still to be encoded, or encoded with an older tokenizer, are not
    counted, and `shards` says how many were)."""
    out = {"shards": 0, "train_tokens": 0, "val_tokens": 0}
    tok = store.manifest(TOKENIZER)
    current = tok["stats"]["extra"]["tokenizer_hash"] if tok else None
    for s in shards:
        m = store.manifest(TOKEN_SHARDS, s)
        if m is None or m["stats"]["extra"].get("tokenizer_hash") != current:
            continue
        out["shards"] += 1
        out["train_tokens"] += m["stats"]["extra"]["train_tokens"]
        out["val_tokens"] += m["stats"]["extra"]["val_tokens"]
    return out
