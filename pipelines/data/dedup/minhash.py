"""MinHash signatures over word n-grams, vectorised over whole batches of documents.

A batch costs a handful of columnar calls instead of per-document Python: words are
normalised and hashed from its UTF-8 bytes (`pipelines.data.words`), n consecutive word
hashes make 32-bit shingle hashes, and datasketch 2.0's "affine32" permutations, with its
own (a, b) for the seed, are reduced per document with `np.minimum.reduceat`. On the same
shingle hashes the signatures equal datasketch's bit for bit, and the columnar steps equal
`normalize_for_dedup` + `word_hash` + `shingle_hashes` (`tests/pipelines/data/test_minhash.py`); see
docs/data.md#deduplication.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np
import pyarrow as pa

from pipelines.config import DedupConfig
from pipelines.data.words import batch_words, normalize_for_dedup, word_hash

__all__ = ["EMPTY", "compute_signatures", "minhash_of_hashes", "normalize_for_dedup", "shingle_hashes"]

SCHEME = "affine32"
_MAX_HASH = np.uint64((1 << 32) - 1)
# Sentinel for documents without any shingle: never put into LSH buckets.
EMPTY = int(_MAX_HASH)
_MUL = np.uint64(0x9E3779B97F4A7C15)
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35))
# Documents per batch: bounds memory (the batch's bytes, words and shingles) at any corpus
# size, and keeps the byte passes of `batch_words` near the cache.
BATCH_DOCS = 2048
BATCH_BYTES = 4 << 20


@lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a, b) for this (num_perm, seed).
    datasketch is imported here, not with the module: it loads scipy (0.3 s), which the
    code location, imported by every Dagster run and daemon, does not otherwise need."""
    from datasketch import MinHash

    a, b = MinHash(num_perm=num_perm, seed=seed, scheme=SCHEME).permutations
    return a.astype(np.uint32), b.astype(np.uint32)


def _combine(wh: np.ndarray, n: int, starts: np.ndarray) -> np.ndarray:
    """uint64 hash of the n words from each of `starts` in `wh`: a polynomial with an odd
    multiplier (so "a b" and "b a" differ), wrapping mod 2^64, then a splitmix64 finaliser
    so the low 32 bits are well mixed."""
    acc = np.zeros(starts.size, dtype=np.uint64)
    for j in range(n):
        acc = acc * _MUL + wh[starts + j]
    return _finalise(acc)


def _combine_all(wh: np.ndarray, n: int) -> np.ndarray:
    """`_combine(wh, n, arange(len(wh) - n + 1))` on contiguous slices."""
    m = wh.size - n + 1
    acc = wh[:m].copy()
    for j in range(1, n):
        acc *= _MUL
        acc += wh[j : j + m]
    return _finalise(acc)


def _finalise(acc: np.ndarray) -> np.ndarray:
    return mix64(acc) & _MAX_HASH


def mix64(acc: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place: every output bit depends on every input bit."""
    acc ^= acc >> np.uint64(30)
    acc *= np.uint64(0xBF58476D1CE4E5B9)
    acc ^= acc >> np.uint64(27)
    acc *= np.uint64(0x94D049BB133111EB)
    acc ^= acc >> np.uint64(31)
    return acc


def shingle_hashes(words: Sequence[str], ngram: int) -> np.ndarray:
    """32-bit hashes (as uint64, sorted, distinct) of the word n-grams of `words`; a text
    shorter than `ngram` words yields one shingle of all its words, an empty one none."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    wh = np.fromiter(map(word_hash, words), dtype=np.uint64, count=len(words))
    n = min(ngram, len(words))
    return np.unique(_combine(wh, n, np.arange(len(words) - n + 1)))


def _fmix32(h: np.ndarray) -> np.ndarray:
    s1, m1, s2, m2 = _FMIX32
    h = h ^ (h >> s1)
    h *= m1
    h ^= h >> s2
    h *= m2
    return h ^ (h >> s1)


def _permuted(h32: np.ndarray, a: np.ndarray, b: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """(num_perm, h32.size) uint32: a * fmix32(h) + b, wrapping mod 2^32 (affine32)."""
    out = buf[:, : h32.size]
    np.multiply(a[:, None], _fmix32(h32)[None, :], out=out)
    out += b[:, None]
    return out


def minhash_of_hashes(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """Signature of one shingle-hash set, exactly as datasketch's affine32 computes it."""
    a, b = permutations(num_perm, seed)
    sig = np.full(num_perm, EMPTY, dtype=np.uint32)
    h = np.asarray(hashes, dtype=np.uint64).astype(np.uint32)
    buf = np.empty((num_perm, min(max(h.size, 1), 8192)), dtype=np.uint32)
    for s in range(0, h.size, buf.shape[1]):
        np.minimum(sig, _permuted(h[s : s + buf.shape[1]], a, b, buf).min(axis=1), out=sig)
    return sig


def batch_shingles(wh: np.ndarray, offsets: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 shingle hashes of a batch, flattened (repeats within a document kept: the
    minimum does not care); int64 shingle offsets per document)."""
    counts = np.diff(offsets)
    n_sh = np.where(counts >= ngram, counts - ngram + 1, np.minimum(counts, 1))
    sh_off = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(n_sh, out=sh_off[1:])
    # word position of every shingle's first word: document start + 0..n_sh-1
    doc_of = np.repeat(np.arange(counts.size), n_sh)
    starts = offsets[doc_of] + (np.arange(sh_off[-1]) - sh_off[doc_of])
    short = np.flatnonzero((counts > 0) & (counts < ngram))
    if short.size == 0 and wh.size >= ngram:
        # every window at once over contiguous slices (no gathers), then the valid starts
        return _combine_all(wh, ngram)[starts].astype(np.uint32), sh_off
    out = np.empty(sh_off[-1], dtype=np.uint64)
    full = counts[doc_of] >= ngram
    out[full] = _combine(wh, ngram, starts[full])
    for k in np.unique(counts[short]):  # short texts: one shingle of all words
        sel = counts[doc_of] == k
        out[sel] = _combine(wh, int(k), starts[sel])
    return out.astype(np.uint32), sh_off


def signatures_of_shingles(h32: np.ndarray, sh_off: np.ndarray, num_perm: int, seed: int,
                            chunk: int) -> np.ndarray:
    """(documents, num_perm) minima of the permuted shingles of each document, permuting
    `chunk` shingles at a time (112 x 8192 x 4 bytes = 3.7 MB: stays in cache)."""
    a, b = permutations(num_perm, seed)
    n_docs = sh_off.size - 1
    out = np.full((n_docs, num_perm), EMPTY, dtype=np.uint32)
    has = np.flatnonzero(np.diff(sh_off) > 0)
    doc_starts = sh_off[has]
    buf = np.empty((num_perm, chunk), dtype=np.uint32)
    for s in range(0, h32.size, chunk):
        e = min(s + chunk, h32.size)
        # segments of this chunk: its start (maybe mid-document) and every document start inside
        lo, hi = np.searchsorted(doc_starts, [s, e])
        seg = np.unique(np.r_[s, doc_starts[lo:hi]]) - s
        docs = has[np.searchsorted(doc_starts, seg + s, side="right") - 1]
        mins = np.minimum.reduceat(_permuted(h32[s:e], a, b, buf), seg, axis=1).T
        out[docs] = np.minimum(out[docs], mins)
    return out


def text_batches(texts: Sequence[str] | pa.Array | pa.ChunkedArray, max_docs: int,
             max_bytes: int = BATCH_BYTES) -> Iterator[pa.Array]:
    """Slices of at most `max_docs` documents and about `max_bytes` of text (at least one
    document each): the byte passes stay near the cache whatever the documents' sizes."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, pa.large_string())
    texts = texts.cast(pa.large_string())
    ends = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    s = 0
    while s < len(texts):
        e = int(np.searchsorted(ends, ends[s] + max_bytes, side="right")) - 1
        e = min(max(e, s + 1), s + max_docs, len(texts))
        yield texts[s:e]
        s = e


def compute_signatures(texts: Sequence[str] | pa.Array | pa.ChunkedArray, cfg: DedupConfig,
                       chunk_shingles: int = 8192, batch_docs: int = BATCH_DOCS) -> np.ndarray:
    """(len(texts), cfg.num_perm) uint32 signatures; all-EMPTY rows for texts without words.
    `texts` may be Python strings or an Arrow string column (no copy into Python objects)."""
    out = np.full((len(texts), cfg.num_perm), EMPTY, dtype=np.uint32)
    row = 0
    for batch in text_batches(texts, batch_docs):
        wh, offsets = batch_words(batch)
        h32, sh_off = batch_shingles(wh, offsets, cfg.ngram)
        out[row : row + len(batch)] = signatures_of_shingles(h32, sh_off, cfg.num_perm, cfg.seed, chunk_shingles)
        row += len(batch)
    return out
