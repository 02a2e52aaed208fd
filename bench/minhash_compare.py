"""Comparing two deduplications of the same documents, for bench/bench_minhash.py: their
clusters, same-cluster pairs and removed sets, and, for pairs only one side linked, the
true n-gram Jaccard under both sides' normalisations.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import numpy as np

from pipelines.data.dedup.clusters import Clusters
from pipelines.data.dedup.minhash import normalize_for_dedup


def groups(assign: dict[str, int]) -> list[frozenset[str]]:
    out: dict[int, set[str]] = {}
    for d, c in assign.items():
        out.setdefault(c, set()).add(d)
    return [frozenset(g) for g in out.values() if len(g) > 1]


def co_pairs(gs: list[frozenset[str]]) -> set[tuple[str, str]]:
    return {p for g in gs for p in combinations(sorted(g), 2)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def grams(words: list[str], n: int) -> set[tuple[str, ...]]:
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def explain(only: set[tuple[str, str]], text_of: dict[str, str], n: int, label: str) -> None:
    """True 5-gram Jaccard of pairs one side linked and the other didn't, under both
    normalisations: near the LSH threshold (about 0.72) means chance (the two sides use
    different random permutations), a big gap between the two columns means normalisation."""
    if not only:
        return
    from datatrove.utils.text import simplify_text

    def j(norm: Callable[[str], list[str]], a: str, b: str) -> float:
        return jaccard(grams(norm(text_of[a]), n), grams(norm(text_of[b]), n))

    dt_norm: Callable[[str], list[str]] = lambda t: simplify_text(t).split()
    rows = [(j(normalize_for_dedup, a, b), j(dt_norm, a, b), a, b) for a, b in sorted(only)]
    ours, dt = (np.array([r[k] for r in rows]) for k in (0, 1))
    short = sum(len(simplify_text(text_of[d]).split()) < n for d in {d for p in only for d in p})
    print(f"  {label}: {len(rows)} pairs; true J (our norm) median {np.median(ours):.2f}"
          f" min {ours.min():.2f} max {ours.max():.2f}; (datatrove norm) median {np.median(dt):.2f};"
          f" |gap| > 0.1 in {int((abs(ours - dt) > 0.1).sum())}; docs under {n} words: {short}")
    for ja, jb, a, b in sorted(rows, key=lambda r: -abs(r[0] - r[1]))[:3]:
        print(f"    {ja:.2f} / {jb:.2f}  {a}  ~  {b}")



def same_groups(a: list[frozenset[str]], b: list[frozenset[str]]) -> str:
    sa, sb = set(a), set(b)
    return f"{len(sa)} / {len(sb)}, {len(sa & sb)} with identical members"


def ours_groups_removed(cl: Clusters, doc_ids: list[str]) -> tuple[list[frozenset[str]], set]:
    assign = {doc_ids[i]: int(c) for i, c in enumerate(cl.labels) if c >= 0}
    return groups(assign), {doc_ids[i] for i in cl.to_remove}


def fmt(t: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}s" for k, v in t.items())


def index_groups_removed(index_dir: Path) -> tuple[list[frozenset[str]], set[str]]:
    """(clusters of size >= 2, removed doc_ids) from our dedup index's near_duplicates.parquet:
    each removed document with the keeper it was removed for."""
    import pyarrow.parquet as pq

    t = pq.read_table(index_dir / "near_duplicates.parquet", columns=["doc_id", "keeper_doc_id"])
    removed, keepers = t["doc_id"].to_pylist(), t["keeper_doc_id"].to_pylist()
    ids = sorted(set(keepers))
    cluster = {k: i for i, k in enumerate(ids)}
    assign = {k: cluster[k] for k in ids} | {d: cluster[k] for d, k in zip(removed, keepers)}
    return groups(assign), set(removed)
