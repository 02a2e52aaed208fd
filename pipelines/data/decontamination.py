"""Which evaluation items appear in training text: n-gram overlap (no torch, no Dagster).

GPT-3's method (Brown et al. 2020, appendix C): an item is contaminated when one of its
13-grams of words occurs in a training document. Words are the dedup's
(`pipelines.data.words`) but keep their digits, so that one leaked templated problem does
not make its siblings look leaked; shorter items are looked up by runs of `min_words`
words, or whole. The evaluation n-grams go into a Bloom filter whose hits are confirmed
exactly, so memory is bounded by the evaluation sets, never by the corpus, which streams.
Details: docs/evaluation.md#decontamination-eval_contamination.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines.data.dedup.minhash import mix64
from pipelines.data.words import batch_words

_MUL = np.uint64(0x9E3779B97F4A7C15)  # odd: "a b" and "b a" hash apart
_SALT = np.uint64(0xD6E8FEB86659FD93)
MIN_ITEM_WORDS = 3  # shorter items are not checkable (with digits kept, "calcula 79 61" is specific)


@dataclass(frozen=True)
class EvalItem:
    """One evaluation item: its set, an id a user can find it by, and its text."""

    set: str
    item_id: str
    text: str


def window_hashes(wh: np.ndarray, offsets: np.ndarray, lengths: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each of `lengths`: (uint64 hash of every run of that many consecutive words
    inside one document; the document each run is in). `wh` holds the word hashes of all
    documents end to end, `offsets` where each document starts (len + 1). One rolling
    pass serves every length: the polynomial of the first k words is on the way to the
    longer one."""
    counts = np.diff(offsets)
    want = {length: i for i, length in enumerate(lengths)}
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.uint64), np.empty(0, np.int64))] * len(lengths)
    longest = max(lengths)
    acc = wh.copy()
    for j in range(1, longest + 1):
        if j in want:
            runs = np.maximum(counts - j + 1, 0)
            doc = np.repeat(np.arange(counts.size), runs)
            first = np.zeros(counts.size + 1, dtype=np.int64)
            np.cumsum(runs, out=first[1:])
            starts = offsets[doc] + (np.arange(doc.size) - first[doc])
            out[want[j]] = (mix64(acc[starts]), doc)  # acc[starts] is a copy: mix64 works in place
        if j < longest and wh.size > j:
            acc = acc[:-1]  # windows of j + 1 words start at most at len - j - 1
            acc *= _MUL
            acc += wh[j:]
    return out


class Bloom:
    """A Bloom filter of 64-bit hashes in a numpy bit array (double hashing, a power-of-two
    size), tested a whole array of hashes at a time."""

    def __init__(self, capacity: int, error: float):
        bits = max(64, math.ceil(-max(capacity, 1) * math.log(error) / math.log(2) ** 2))
        self.bits = 1 << (bits - 1).bit_length()
        self.k = max(1, round(-math.log2(error)))  # the optimum for the unrounded size
        self.words = np.zeros(self.bits // 64, dtype=np.uint64)
        self._mask = np.uint64(self.bits - 1)

    def _step(self, h: np.ndarray) -> np.ndarray:
        return mix64(h ^ _SALT) | np.uint64(1)  # odd: the k positions differ in a power-of-two table

    def _bit(self, pos: np.ndarray) -> np.ndarray:
        p = pos & self._mask
        return (self.words[p >> np.uint64(6)] >> (p & np.uint64(63))) & np.uint64(1) == 1

    def add(self, h: np.ndarray) -> None:
        pos, step = np.asarray(h, np.uint64).copy(), self._step(np.asarray(h, np.uint64))
        for _ in range(self.k):
            p = pos & self._mask
            np.bitwise_or.at(self.words, p >> np.uint64(6), np.uint64(1) << (p & np.uint64(63)))
            pos += step

    def test(self, h: np.ndarray) -> np.ndarray:
        """The indices of the hashes that may be in the filter (a hash left out is certainly
        not). Each probe keeps only the survivors of the ones before: with the filter at
        most half full, a training n-gram costs about two bit reads, not k."""
        h = np.asarray(h, np.uint64)
        alive = np.flatnonzero(self._bit(h))  # the first probe is at h itself: no step to compute
        pos = h[alive]
        step = self._step(pos)
        for _ in range(1, self.k):
            pos += step
            keep = self._bit(pos)
            alive, pos, step = alive[keep], pos[keep], step[keep]
        return alive

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


class NgramIndex:
    """The n-grams of evaluation items, to look training text up in."""

    def __init__(self, items: Sequence[EvalItem], ngram: int = 13, min_words: int = 8, error: float = 1e-4):
        self.items, self.ngram, self.min_words = list(items), ngram, min_words
        wh, offs = batch_words(pa.array([i.text for i in self.items], pa.large_string()), fold_digits=False)
        counts = np.diff(offs)
        self.checkable = counts >= MIN_ITEM_WORDS
        medium = (counts >= min_words) & (counts < ngram)
        short = self.checkable & (counts < min(min_words, ngram))
        # n-grams for long items, runs of min_words words for medium ones, the whole item for short ones
        self.lengths = [ngram, *([min_words] if medium.any() else []), *sorted({int(c) for c in counts[short]})]
        hashes, owners = [], []
        for length, (h, doc) in zip(self.lengths, window_hashes(wh, offs, self.lengths), strict=True):
            keep = (counts[doc] >= ngram if length == ngram else medium[doc] if length == min_words
                    else short[doc] & (counts[doc] == length))
            hashes.append(h[keep])
            owners.append(doc[keep])
        h, o = np.concatenate(hashes), np.concatenate(owners)
        order = np.lexsort((o, h))
        self.hashes, self.owners = h[order], o[order].astype(np.int32)
        distinct = np.unique(self.hashes)
        self.bloom = Bloom(distinct.size, error)
        self.bloom.add(distinct)

    @property
    def nbytes(self) -> int:
        return self.hashes.nbytes + self.owners.nbytes + self.bloom.nbytes

    def scan(self, texts: pa.Array | Sequence[str]) -> list[tuple[int, int, int]]:
        """(document index in `texts`, item index, n-grams shared) for every document and
        item that share at least one n-gram."""
        if not isinstance(texts, pa.Array):
            texts = pa.array(list(texts), pa.large_string())
        wh, offs = batch_words(texts, fold_digits=False)
        docs, items = [], []
        for h, doc in window_hashes(wh, offs, self.lengths):
            maybe = self.bloom.test(h)
            if maybe.size == 0:
                continue
            h, doc = h[maybe], doc[maybe]
            lo = np.searchsorted(self.hashes, h, "left")
            hi = np.searchsorted(self.hashes, h, "right")
            hit = hi > lo
            for d, a, b in zip(doc[hit].tolist(), lo[hit].tolist(), hi[hit].tolist(), strict=True):
                owners = self.owners[a:b]
                docs.append(np.full(owners.size, d, np.int64))
                items.append(owners.astype(np.int64))
        if not docs:
            return []
        pairs, counts = np.unique(np.stack([np.concatenate(docs), np.concatenate(items)], axis=1), axis=0,
                                  return_counts=True)
        return [(int(d), int(i), int(c)) for (d, i), c in zip(pairs, counts, strict=True)]
