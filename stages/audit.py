"""Invariants the asset checks assert, as plain functions over the stored tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from pipelines.data.langid import detect
from stages.store import DataStore

REJECT_STAGES = ("read", "clean", "filter", "dedup")


@dataclass
class Accounting:
    read: int
    kept: int
    rejected: int
    missing: list[str] = field(default_factory=list)  # read but neither kept nor rejected
    duplicated: list[str] = field(default_factory=list)  # appear more than once
    unknown: list[str] = field(default_factory=list)  # kept/rejected but never read

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.unknown)


def _ids(path) -> list[str]:
    return pq.read_table(path, columns=["doc_id"])["doc_id"].to_pylist() if path.exists() else []


def exactly_once(store: DataStore, shard: str) -> Accounting:
    """Every document read from the shard appears exactly once across the kept table and
    the rejections of all stages."""
    read = set(_ids(store.part("raw_documents", shard))) | set(_ids(store.rejected(shard, "read")))
    kept = _ids(store.part("deduped_documents", shard))
    rejected = [i for st in REJECT_STAGES for i in _ids(store.rejected(shard, st))]
    counts = Counter(kept + rejected)
    return Accounting(
        read=len(read), kept=len(kept), rejected=len(rejected),
        missing=sorted(read - counts.keys())[:20],
        duplicated=sorted(k for k, v in counts.items() if v > 1)[:20],
        unknown=sorted(counts.keys() - read)[:20],
    )


@dataclass
class Purity:
    checked: int
    labelled_other: int  # kept rows whose stored `lang` is not the target
    redetected_target: float  # share of a sample that fastText labels as target again


def language_purity(store: DataStore, shard: str, language: str, sample: int = 500, max_chars: int = 1000) -> Purity:
    t = pq.read_table(store.part("deduped_documents", shard), columns=["text", "lang"])
    langs = t["lang"].to_pylist()
    texts = t["text"].to_pylist()[:sample]
    again = detect(texts, max_chars) if texts else []
    share = sum(1 for l, _ in again if l == language) / len(again) if again else 1.0
    return Purity(checked=len(langs), labelled_other=sum(1 for l in langs if l != language), redetected_target=share)
