"""MinHash signatures over word n-grams, with datasketch's permutations.

datasketch's `MinHash.update_batch` hashes every shingle in a Python loop (sha1 by
default). We produce the same kind of signature much faster by
  1. normalising text once (lowercase, digits -> 0, punctuation removed, Latin accents
     folded: the recall-oriented normalisation datatrove also applies),
  2. hashing each distinct *word* once (xxh3) and combining n consecutive word hashes into
     a 32-bit shingle hash with vectorised numpy,
  3. applying datasketch's own permutation parameters with its "legacy" scheme (the
     universal hash `((h * a + b) % (2^61 - 1)) & (2^32 - 1)` that FineWeb/datatrove also
     use; datasketch 2.0 defaults to "affine32") to many documents at once and reducing
     with `np.minimum.reduceat`.
`tests/test_minhash.py` checks that step 3 equals `datasketch.MinHash.update_batch` on
the same shingle hashes, bit for bit.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import xxhash
from datasketch import MinHash

from pipelines.config import DedupConfig

_MERSENNE = np.uint64((1 << 61) - 1)
_MAX_HASH = np.uint64((1 << 32) - 1)
_DIGITS = re.compile(r"\d+(?:[.,]\d+)?")
_NON_WORD = re.compile(r"[^\w\s]+|_")
# Sentinel for documents without any shingle: never put into LSH buckets.
EMPTY = int(_MAX_HASH)


def _accent_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for cp in range(0xC0, 0x250):
        ch = chr(cp)
        base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
        if base and base != ch and base.isascii():
            table[cp] = base
    return table


_ACCENTS = _accent_table()


def normalize_for_dedup(text: str) -> list[str]:
    """Words of `text` after recall-oriented normalisation."""
    text = _DIGITS.sub("0", text.lower())
    text = _NON_WORD.sub(" ", text).translate(_ACCENTS)
    return text.split()


@lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's permutation parameters (a, b) for this (num_perm, seed)."""
    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="legacy").permutations
    return a.astype(np.uint64), b.astype(np.uint64)


def shingle_hashes(words: Sequence[str], ngram: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """32-bit hashes (as uint64) of the word n-grams of `words`; a text shorter than
    `ngram` words yields one shingle of all its words, an empty one none."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    cache = {} if cache is None else cache
    wh = np.fromiter(
        (cache[w] if w in cache else cache.setdefault(w, xxhash.xxh3_64_intdigest(w.encode())) for w in words),
        dtype=np.uint64,
        count=len(words),
    )
    n = min(ngram, len(words))
    # Polynomial combination of n word hashes; uint64 arithmetic wraps, which is what we
    # want. The per-position odd multipliers make "a b" and "b a" differ.
    acc = np.zeros(len(words) - n + 1, dtype=np.uint64)
    for j in range(n):
        acc = acc * np.uint64(0x9E3779B97F4A7C15) + wh[j : len(wh) - n + 1 + j]
    # Final avalanche (splitmix64 finaliser) so the low 32 bits are well mixed.
    acc ^= acc >> np.uint64(30)
    acc *= np.uint64(0xBF58476D1CE4E5B9)
    acc ^= acc >> np.uint64(27)
    acc *= np.uint64(0x94D049BB133111EB)
    acc ^= acc >> np.uint64(31)
    return np.unique(acc & _MAX_HASH)


def minhash_of_hashes(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """Signature of one shingle-hash set, exactly as datasketch computes it."""
    a, b = permutations(num_perm, seed)
    if hashes.size == 0:
        return np.full(num_perm, EMPTY, dtype=np.uint32)
    phv = ((hashes[:, None] * a[None, :] + b[None, :]) % _MERSENNE) & _MAX_HASH
    return phv.min(axis=0).astype(np.uint32)


def compute_signatures(
    texts: Sequence[str], cfg: DedupConfig, chunk_shingles: int = 1 << 16
) -> np.ndarray:
    """(len(texts), cfg.num_perm) uint32 signatures; all-EMPTY rows for texts without words."""
    num_perm = cfg.num_perm
    a, b = permutations(num_perm, cfg.seed)
    out = np.full((len(texts), num_perm), EMPTY, dtype=np.uint32)
    cache: dict[str, int] = {}
    pending: list[tuple[int, np.ndarray]] = []
    pending_size = 0

    def flush() -> None:
        nonlocal pending, pending_size
        if not pending:
            return
        rows = [i for i, _ in pending]
        lens = np.array([h.size for _, h in pending])
        allh = np.concatenate([h for _, h in pending])
        phv = ((allh[:, None] * a[None, :] + b[None, :]) % _MERSENNE) & _MAX_HASH
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        out[rows] = np.minimum.reduceat(phv, starts, axis=0).astype(np.uint32)
        pending, pending_size = [], 0

    for i, text in enumerate(texts):
        h = shingle_hashes(normalize_for_dedup(text), cfg.ngram, cache)
        if h.size == 0:
            continue
        if h.size >= chunk_shingles:  # one huge document: compute on its own, in slices
            flush()
            sig = np.full(num_perm, EMPTY, dtype=np.uint64)
            for s in range(0, h.size, chunk_shingles):
                part = h[s : s + chunk_shingles]
                phv = ((part[:, None] * a[None, :] + b[None, :]) % _MERSENNE) & _MAX_HASH
                sig = np.minimum(sig, phv.min(axis=0))
            out[i] = sig.astype(np.uint32)
            continue
        pending.append((i, h))
        pending_size += h.size
        if pending_size >= chunk_shingles:
            flush()
    flush()
    return out
