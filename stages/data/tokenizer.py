"""The tokenizer (whole corpus) as a memoised stage, and its round-trip check; the token
shards that use it are in stages/data/token_shards.py.

The tokenizer's cache key is its training settings and code version only, not the corpus:
a shard that lands later is encoded with the existing tokenizer (retraining would make
every token shard and every model trained on them stale). `tokenizer.retrain` forces
a new one; its data version is the hash of tokenizer.json, so an identical result
leaves downstream fresh.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.tokens.tokenizer import (
    ENCODER_FILE,
    PROBES,
    DocumentEncoder,
    TokenizerError,
    VocabularyTooLarge,
    in_sample,
    is_validation,
    reachable_vocab,
    save_pretrained,
    train_bpe,
)
from stages.asset_names import DEDUPED_DOCUMENTS, TOKENIZER
from stages.config import YunqueConfig
from stages.store.keys import cache_key
from stages.store.outputs import READ_BATCH, DataStore, StageStats
from stages.store.versions import CODE_VERSIONS


def _docs(store: DataStore, shards: Sequence[str], columns: list[str]) -> Iterator[dict]:
    for s in sorted(shards):
        import pyarrow.parquet as pq  # loaded when the stage reads, not when the code location loads

        pf = pq.ParquetFile(store.part(DEDUPED_DOCUMENTS, s))
        for batch in pf.iter_batches(batch_size=READ_BATCH, columns=columns):
            yield from batch.to_pylist()


@dataclass
class _Sample:
    """Counts what the training iterator yielded (it is consumed inside `tokenizers`)."""

    documents: int = 0
    bytes: int = 0
    held_out: int = 0
    val: list[dict] = field(default_factory=list)
    head: list[dict] = field(default_factory=list)  # first training documents, if none are held out


# The settings that shape each output; check thresholds and `retrain` are not among them.
TRAINING_FIELDS = ("vocab_size", "min_frequency", "sample_bytes", "val_fraction", "split_seed", "max_length")
SPLIT_FIELDS = ("val_fraction", "split_seed")


def tokenizer_key(cfg: YunqueConfig) -> str:
    return cache_key(TOKENIZER, CODE_VERSIONS[TOKENIZER], cfg.section_hash("tokenizer", fields=TRAINING_FIELDS))


def tokenizer_stage(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> StageStats:
    """Train (or reuse) the tokenizer; a second writer waits for the first and reuses its result."""
    with store.lock(TOKENIZER):
        return _tokenizer_stage(store, shards, cfg)


def _tokenizer_stage(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> StageStats:
    t = cfg.tokenizer
    key = tokenizer_key(cfg)
    if not t.retrain and (hit := store.cached(TOKENIZER, None, key)):
        return hit
    if not shards:
        raise TokenizerError("no shard has deduped_documents yet: nothing to train a tokenizer on")
    total = sum(store.manifest("deduped_documents", s)["stats"]["bytes_out"] for s in shards)
    fraction = min(1.0, t.sample_bytes / max(1, total * (1 - t.val_fraction)))
    available = min(t.sample_bytes, int(total * (1 - t.val_fraction)))
    if available and (most := reachable_vocab(available, t.min_frequency)) < t.vocab_size:
        raise VocabularyTooLarge(
            f"tokenizer.vocab_size={t.vocab_size:,} is out of reach of {available:,} bytes of training text: each "
            f"token past the bytes needs a pair seen {t.min_frequency} times, so at most {most:,} (fewer in "
            "practice); lower tokenizer.vocab_size, or add data")
    sample = _Sample()

    def texts() -> Iterator[str]:
        for row in _docs(store, shards, ["doc_id", "text", "lang"]):
            if is_validation(row["doc_id"], t.val_fraction, t.split_seed):
                sample.held_out += 1
                if len(sample.val) < max(t.check_documents, 2000):
                    sample.val.append(row)
                continue
            if not in_sample(row["doc_id"], fraction, t.split_seed) or sample.bytes >= t.sample_bytes:
                continue
            sample.documents += 1
            if len(sample.head) < 200:
                sample.head.append(row)
            sample.bytes += len(row["text"].encode())
            yield row["text"]

    empty = TokenizerError(f"shards {sorted(shards)} hold no training documents ({sample.held_out} "
                           "documents, all in the validation split): the deduplicated corpus is empty")
    start = time.perf_counter()
    try:
        tok = train_bpe(texts(), t.vocab_size, t.min_frequency)
    except TokenizerError as e:  # on no text at all, say that, not "vocabulary too large"
        raise (e if sample.documents else empty) from None
    seconds = time.perf_counter() - start
    if sample.documents == 0:
        raise empty
    # A corpus too small to hold any document out is still reported on, and says so.
    held_out = bool(sample.val)
    report_docs = sample.val or sample.head
    texts_val = [r["text"] for r in report_docs]

    def write(directory: Path) -> list[str]:
        tok_hash = save_pretrained(tok, directory, t.max_length)
        backend, mismatches = choose_backend(directory, texts_val + PROBES)
        stats.extra.update(encoder=backend, encoder_mismatches=mismatches)
        (directory / ENCODER_FILE).write_text(json.dumps(
            {"backend": backend, "tokenizer_hash": tok_hash, "checked_texts": len(texts_val) + len(PROBES),
             "mismatches": mismatches}, indent=1))
        enc = DocumentEncoder(directory)
        report = compression_report(enc, report_docs) | {"held_out": held_out}
        (directory / "compression_report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
        stats.extra.update(tokenizer_hash=tok_hash, compression=report)
        return sorted(p.name for p in directory.iterdir())

    stats = StageStats(
        key=key, docs_in=sample.documents, docs_out=sample.documents, bytes_in=sample.bytes,
        extra={"vocab_size": tok.get_vocab_size(), "train_documents": sample.documents,
               "train_bytes": sample.bytes, "held_out_documents": sample.held_out,
               "sample_fraction": round(fraction, 6), "shards": sorted(shards),
               "train_seconds": round(seconds, 2)},
    )
    store.commit(TOKENIZER, None, stats, {}, write=write)
    return stats


def choose_backend(directory: Path, texts: Sequence[str]) -> tuple[str, int]:
    """tiktoken if it reproduces the HF ids on every text, else HF (correct, slower).
    Compared on the saved files, as every consumer loads them."""
    hf = DocumentEncoder(directory, backend="hf").encode_batch(texts)
    tt = DocumentEncoder(directory, backend="tiktoken").encode_batch(texts, threads=os.cpu_count() or 1)
    mismatches = sum(a != b for a, b in zip(hf, tt))
    return ("tiktoken" if mismatches == 0 else "hf"), mismatches


def compression_report(enc: DocumentEncoder, docs: Sequence[dict]) -> dict:
    """Tokens per word, bytes and characters per token on held-out documents, per language."""
    by_lang: dict[str, dict[str, float]] = {}
    ids = enc.encode_batch([d["text"] for d in docs])
    for d, toks in zip(docs, ids):
        r = by_lang.setdefault(d.get("lang") or "unknown", {"documents": 0, "words": 0, "tokens": 0,
                                                             "bytes": 0, "chars": 0})
        r["documents"] += 1
        r["words"] += len(d["text"].split())
        r["tokens"] += len(toks)
        r["bytes"] += len(d["text"].encode())
        r["chars"] += len(d["text"])
    for r in by_lang.values():
        r["tokens_per_word"] = round(r["tokens"] / max(1, r["words"]), 4)
        r["bytes_per_token"] = round(r["bytes"] / max(1, r["tokens"]), 4)
        r["chars_per_token"] = round(r["chars"] / max(1, r["tokens"]), 4)
    return {"vocab_size": enc.vocab_size, "documents": len(docs), "languages": by_lang}


@dataclass
class RoundTrip:
    checked: int
    failures: list[dict]


def round_trip(store: DataStore, shards: Sequence[str], cfg: YunqueConfig, limit: int | None = None) -> RoundTrip:
    """decode(encode(text)) == text for held-out documents and the probe strings, with the
    encoder token_shards uses; and that encoder agrees with the HF tokenizer. The
    documents are the *last* held-out ones of every shard (training chose the encoder on
    the first ones), so each shard, including ones added later, is represented."""
    t = cfg.tokenizer
    directory = store.verified(TOKENIZER)
    enc = DocumentEncoder(directory)
    hf = DocumentEncoder(directory, backend="hf")
    quota = -(-(limit or t.check_documents) // max(1, len(shards)))
    texts = list(PROBES)
    for s in sorted(shards):
        tail: deque[str] = deque(maxlen=quota)
        for row in _docs(store, [s], ["doc_id", "text"]):
            if is_validation(row["doc_id"], t.val_fraction, t.split_seed):
                tail.append(row["text"])
        texts += tail
    failures = []
    for text, ids, ref in zip(texts, enc.encode_batch(texts), hf.encode_batch(texts)):
        back = enc.decode(ids)
        if back != text or ids != ref:
            failures.append({"text": text[:120], "decoded": back[:120], "same_ids_as_hf": ids == ref})
    return RoundTrip(len(texts), failures)
