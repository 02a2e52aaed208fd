"""Near-duplicate clusters (LSH over MinHash bands) and exact paragraph dedup.

Both decisions are order-independent, so the result does not depend on which shard was
processed first: the keeper of a near-duplicate cluster is its smallest `doc_id`, and a
repeated paragraph stays only in the smallest `doc_id` (among surviving documents) that
contains it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import xxhash

from pipelines.config import DedupConfig
from pipelines.data.dedup.lsh_index import band_keys, bucket_edges, components, keepers, sort_band
from pipelines.data.dedup.minhash import EMPTY

_WS = re.compile(r"\s+")


@dataclass
class Clusters:
    """`labels[i]` is the cluster of document i (-1: a singleton); `keeper[i]` the index of
    its cluster's keeper (itself for singletons and keepers)."""

    labels: np.ndarray
    keeper: np.ndarray

    @property
    def to_remove(self) -> np.ndarray:
        return np.flatnonzero(self.keeper != np.arange(self.keeper.size))

    @property
    def n_clusters(self) -> int:
        return int(np.unique(self.labels[self.labels >= 0]).size)


def lsh_clusters(sigs: np.ndarray, doc_ids: Sequence[str] | pa.Array, cfg: DedupConfig) -> Clusters:
    """Connected components of "shares at least one LSH bucket"; keeper = min doc_id.
    In memory, for signatures at hand; `stages.data.dedup` runs the same steps band by band
    from the signature files (`pipelines.data.dedup.lsh_index`)."""
    n = sigs.shape[0]
    if sigs.shape[1] != cfg.num_perm:
        raise ValueError(f"signatures have {sigs.shape[1]} values, config expects {cfg.num_perm}")
    keys = band_keys(sigs, cfg)
    rows = np.arange(n, dtype=np.int64)
    edges = [bucket_edges(*sort_band(keys[:, b], rows)) for b in range(cfg.bands)]
    labels = components(n, edges)
    ids = doc_ids if isinstance(doc_ids, pa.Array) else pa.array(list(doc_ids), pa.string())
    return Clusters(labels=labels, keeper=keepers(labels, ids))


def paragraph_hashes(text: str, min_chars: int) -> list[int]:
    """One hash per line of `text` (`text.split("\\n")`); 0 for lines too short to dedup.

    Lines are what the extractors emit as paragraphs. The hash ignores case and
    whitespace so that re-wrapped copies still match."""
    out = []
    for line in text.split("\n"):
        norm = _WS.sub(" ", line).strip().lower()
        out.append(xxhash.xxh3_64_intdigest(norm.encode()) or 1 if len(norm) >= min_chars else 0)
    return out


def batch_paragraphs(texts: pa.Array | pa.ChunkedArray, min_chars: int) -> tuple[pa.Array, pa.Array]:
    """`paragraph_hashes` and the characters of each stripped line, for a whole column at
    once: (list<uint64>, list<int32>) per text. Lines are normalised in polars (Rust's
    Unicode `\\s`, like Python's); only distinct long lines are hashed, once each."""
    s = pl.Series(texts).fill_null("").str.split("\n")
    flat = s.explode(empty_as_null=False)
    stripped = flat.str.strip_chars()
    norm = flat.str.replace_all(r"\s+", " ").str.strip_chars().str.to_lowercase()
    long = norm.str.len_chars() >= min_chars
    distinct = norm.filter(long).unique()
    hashes = [xxhash.xxh3_64_intdigest(t.encode()) or 1 for t in distinct.to_list()]
    lookup = pl.DataFrame({"norm": distinct, "h": pl.Series(hashes, dtype=pl.UInt64)})
    h = (pl.DataFrame({"norm": norm}).with_row_index().join(lookup, on="norm", how="left")
         .sort("index")["h"].fill_null(0))
    offsets = np.zeros(len(s) + 1, dtype=np.int32)
    np.cumsum(s.list.len().to_numpy(), out=offsets[1:])
    off = pa.array(offsets)
    return (pa.ListArray.from_arrays(off, pa.array(h.to_numpy(), pa.uint64())),
            pa.ListArray.from_arrays(off, pa.array(stripped.str.len_chars().to_numpy().astype(np.int32))))


def paragraph_decisions(docs: pl.DataFrame, min_chars: int) -> pl.DataFrame:
    """Columnar paragraph dedup. `docs`: one row per document with `doc` (any integer id),
    `rank` (order of its doc_id, distinct), `paragraph_hashes` (list[u64], 0: not deduped)
    and `line_chars` (list[i32], same length; null: no rejection by length). Returns
    (doc, line_indices (sorted), reject) for documents that lose lines.

    A line is dropped when its hash is held by a document of smaller rank that is kept; a
    document left with fewer than `min_chars` characters is rejected and does not hold its
    hashes. That is a sequential definition (a rejection frees hashes for later documents,
    which may then keep enough text); it is evaluated here as a fixpoint over whole
    columns: each round recomputes every decision from the previous round's rejections.
    A document's decision depends only on smaller ranks, so after round k the k smallest
    "layers" are final and the loop ends in as many rounds as the longest such chain (in
    practice two or three), with exactly the sequential result."""
    lines = (docs.with_columns(line=pl.int_ranges(pl.col("paragraph_hashes").list.len(), dtype=pl.Int32))
             .explode(["paragraph_hashes", "line_chars", "line"], empty_as_null=False)
             .drop_nulls("line")
             .rename({"paragraph_hashes": "hash", "line_chars": "chars"}))
    total = lines.group_by("doc").agg(total=pl.col("chars").sum())
    held = lines.filter(pl.col("hash") != 0).select("doc", "rank", "line", "hash", "chars")
    rejected = pl.Series("doc", [], dtype=docs["doc"].dtype)
    while True:
        holders = (held.filter(~pl.col("doc").is_in(rejected.implode()))
                   .group_by("hash").agg(first=pl.col("rank").min()))
        drops = held.join(holders, on="hash").filter(pl.col("rank") > pl.col("first"))
        per_doc = (drops.group_by("doc").agg(pl.col("line").sort().alias("line_indices"),
                                              dropped=pl.col("chars").sum())
                   .join(total, on="doc", how="left"))
        short = (pl.col("total") - pl.col("dropped")) < min_chars
        per_doc = per_doc.with_columns(reject=short.fill_null(False))
        now = per_doc.filter("reject")["doc"].sort()
        if now.equals(rejected.sort()):
            return per_doc.select("doc", "line_indices", "reject").sort("doc")
        rejected = now


def paragraph_drops(
    doc_ids: Sequence[str],
    hashes: Sequence[Sequence[int]],
    line_chars: Sequence[Sequence[int]] | None = None,
    min_chars: int = 0,
) -> tuple[dict[int, list[int]], set[int]]:
    """({document index: [line indices to drop]}, {documents to reject as too short}):
    `paragraph_decisions` on Python lists (the first holder by doc_id keeps a paragraph;
    a document rejected as too short does not claim its paragraphs; repeats inside one
    document are left to the Gopher repetition filter)."""
    if not doc_ids:
        return {}, set()
    order = sorted(range(len(doc_ids)), key=lambda i: doc_ids[i])
    rank = np.empty(len(doc_ids), dtype=np.int64)
    rank[order] = np.arange(len(doc_ids))
    chars = line_chars if line_chars is not None else [[0] * len(h) for h in hashes]
    df = pl.DataFrame({"doc": np.arange(len(doc_ids)), "rank": rank,
                       "paragraph_hashes": pl.Series([list(h) for h in hashes], dtype=pl.List(pl.UInt64)),
                       "line_chars": pl.Series([list(c) for c in chars], dtype=pl.List(pl.Int32))})
    out = paragraph_decisions(df, min_chars if line_chars is not None else 0)
    drops = dict(zip(out["doc"].to_list(), out["line_indices"].to_list()))
    return drops, set(out.filter("reject")["doc"].to_list())


def drop_lines(text: str, line_indices: Sequence[int]) -> str:
    gone = set(line_indices)
    return "\n".join(l for j, l in enumerate(text.split("\n")) if j not in gone)


def estimated_jaccard_pairs(sigs: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """All pairs (i, j, estimate) among `sigs` with estimated Jaccard >= threshold.

    Quadratic: meant for the asset check's sample of a few thousand documents."""
    out: list[tuple[int, int, float]] = []
    valid = ~(sigs == EMPTY).all(axis=1)
    for i in range(sigs.shape[0] - 1):
        if not valid[i]:
            continue
        est = (sigs[i + 1 :] == sigs[i]).mean(axis=1)
        for j in np.flatnonzero((est >= threshold) & valid[i + 1 :]):
            out.append((i, i + 1 + int(j), float(est[j])))
    return out
