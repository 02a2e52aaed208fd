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
_S61 = np.uint64(61)
_DIGITS = re.compile(r"\d+(?:[.,]\d+)?")
# A word is a run of \w without "_": the same tokens as replacing [^\w\s]+ and "_" by
# spaces and splitting, in one regex pass instead of a substitution and a split.
_WORD = re.compile(r"[^\W_]+")
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


def _raw_words(text: str) -> list[str]:
    """`normalize_for_dedup` without the accent folding, which `shingle_hashes` applies
    once per distinct word instead of once per character of every text."""
    return _WORD.findall(_DIGITS.sub("0", text.lower()))


def normalize_for_dedup(text: str) -> list[str]:
    """Words of `text` after recall-oriented normalisation."""
    # Folding maps Latin letters to ASCII letters, so it can go before tokenising.
    return _WORD.findall(_DIGITS.sub("0", text.lower()).translate(_ACCENTS))


@lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's permutation parameters (a, b) for this (num_perm, seed)."""
    a, b = MinHash(num_perm=num_perm, seed=seed, scheme="legacy").permutations
    return a.astype(np.uint64), b.astype(np.uint64)


class WordHashes(dict[str, int]):
    """word -> xxh3 of its accent-folded form, computed on first lookup. Folding is
    idempotent, so words from `normalize_for_dedup` and `_raw_words` hash the same."""

    def __missing__(self, w: str) -> int:
        h = self[w] = xxhash.xxh3_64_intdigest(w.translate(_ACCENTS).encode())
        return h


def shingle_hashes(words: Sequence[str], ngram: int, cache: WordHashes | None = None) -> np.ndarray:
    """32-bit hashes (as uint64) of the word n-grams of `words`; a text shorter than
    `ngram` words yields one shingle of all its words, an empty one none."""
    if not words:
        return np.empty(0, dtype=np.uint64)
    cache = WordHashes() if cache is None else cache
    # map over the C-level __getitem__: no Python frame per word unless it is new
    wh = np.fromiter(map(cache.__getitem__, words), dtype=np.uint64, count=len(words))
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


def _permuted_low32(
    h: np.ndarray, a: np.ndarray, b: np.ndarray, work: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """(num_perm, h.size) uint32: ((h * a + b) mod (2^61 - 1)) & (2^32 - 1), datasketch's
    legacy permutation, computed in preallocated cache-sized buffers.

    uint64 `%` is a hardware division per element; since 2^61 == 1 (mod 2^61 - 1),
    x mod p is (x & p) + (x >> 61) minus p at most once, all cheap element-wise ops."""
    buf, tmp, low = (w[:, : h.size] for w in work)
    np.multiply(a[:, None], h[None, :], out=buf)  # wraps mod 2^64, as datasketch's does
    buf += b[:, None]
    np.right_shift(buf, _S61, out=tmp)
    buf &= _MERSENNE
    buf += tmp
    np.subtract(buf, _MERSENNE, out=tmp)  # wraps to above buf unless buf >= p
    np.minimum(buf, tmp, out=buf)
    np.copyto(low, buf, casting="unsafe")  # uint64 -> uint32 keeps the low 32 bits
    return low


def _work_buffers(num_perm: int, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u64 = np.empty((2, num_perm, chunk), dtype=np.uint64)
    return u64[0], u64[1], np.empty((num_perm, chunk), dtype=np.uint32)


def minhash_of_hashes(hashes: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """Signature of one shingle-hash set, exactly as datasketch computes it."""
    a, b = permutations(num_perm, seed)
    if hashes.size == 0:
        return np.full(num_perm, EMPTY, dtype=np.uint32)
    h = np.asarray(hashes, dtype=np.uint64)
    chunk = 4096
    work = _work_buffers(num_perm, min(h.size, chunk))
    sig = np.full(num_perm, EMPTY, dtype=np.uint32)
    for s in range(0, h.size, chunk):
        np.minimum(sig, _permuted_low32(h[s : s + chunk], a, b, work).min(axis=1), out=sig)
    return sig


def compute_signatures(
    texts: Sequence[str], cfg: DedupConfig, chunk_shingles: int = 4096
) -> np.ndarray:
    """(len(texts), cfg.num_perm) uint32 signatures; all-EMPTY rows for texts without words.

    Shingles of consecutive documents are permuted together in chunks of about
    `chunk_shingles` (4096 x 112 x 8 bytes = 3.7 MB per buffer: big enough to amortise
    numpy's per-call cost, small enough to stay in cache)."""
    num_perm = cfg.num_perm
    a, b = permutations(num_perm, cfg.seed)
    out = np.full((len(texts), num_perm), EMPTY, dtype=np.uint32)
    work = _work_buffers(num_perm, chunk_shingles)
    cache = WordHashes()
    rows: list[int] = []
    pending: list[np.ndarray] = []
    pending_size = 0

    def flush() -> None:
        nonlocal pending_size
        if not rows:
            return
        lens = np.fromiter((h.size for h in pending), dtype=np.int64, count=len(pending))
        starts = np.zeros(lens.size, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        low = _permuted_low32(np.concatenate(pending), a, b, work)
        out[rows] = np.minimum.reduceat(low, starts, axis=1).T
        rows.clear()
        pending.clear()
        pending_size = 0

    for i, text in enumerate(texts):
        h = shingle_hashes(_raw_words(text), cfg.ngram, cache)
        if h.size == 0:
            continue
        if pending_size + h.size > chunk_shingles:
            flush()
        if h.size > chunk_shingles:  # one huge document: on its own, in slices
            sig = out[i]
            for s in range(0, h.size, chunk_shingles):
                part = _permuted_low32(h[s : s + chunk_shingles], a, b, work)
                np.minimum(sig, part.min(axis=1), out=sig)
            continue
        rows.append(i)
        pending.append(h)
        pending_size += h.size
    flush()
    return out
