"""A columnar LSH index over MinHash band keys, built one band at a time.

Every shard's signature file carries its band keys as columns (`band_00` .. `band_13`,
uint64; 0 for a document without shingles, which joins no bucket). A band is then an
independent job: read only that column of every shard (parquet column projection), sort,
and link each member of a bucket to the bucket's first member. Its memory is one band of
the corpus (8 bytes of key + 8 of row id + the sort's scratch per document), so bands can
run in parallel processes, or in separate runs, and the corpus may outgrow memory many
times over. No per-document Python object exists anywhere: rows are integers, doc_ids stay
in Arrow arrays.

The persisted index (per band: keys sorted, with their row ids) answers a new shard's
query by `searchsorted`: the incremental path of `stages.data.dedup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from pipelines.config import DedupConfig
from pipelines.data.dedup.minhash import EMPTY

_FMIX1, _FMIX2, _S33 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33)
NO_BUCKET = np.uint64(0)


def band_column(b: int) -> str:
    return f"band_{b:02d}"


def band_keys(sigs: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """(n, bands) uint64 bucket keys: a hash of each band's `rows` signature values, 0 for
    documents without shingles (a real key is 0 with probability 2^-64).

    Vectorised (murmur3's fmix64 after xor-ing in each value); the band index seeds its
    keys, so two bands never share a key by construction of their inputs."""
    n = sigs.shape[0]
    s = np.ascontiguousarray(sigs, dtype=np.uint32).reshape(n, cfg.bands, cfg.rows)
    keys = np.empty((n, cfg.bands), dtype=np.uint64)
    keys[:] = np.arange(cfg.bands, dtype=np.uint64)
    for j in range(cfg.rows):
        keys ^= s[:, :, j]
        keys ^= keys >> _S33
        keys *= _FMIX1
        keys ^= keys >> _S33
        keys *= _FMIX2
        keys ^= keys >> _S33
    keys[(sigs == EMPTY).all(axis=1)] = NO_BUCKET
    return keys


def sort_band(keys: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, rows) of the documents that join a bucket, sorted by key then row."""
    keep = keys != NO_BUCKET
    k, r = keys[keep], rows[keep]
    order = np.lexsort((r, k))
    return k[order], r[order]


def bucket_edges(sorted_keys: np.ndarray, sorted_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (member, first member of its bucket) of a sorted band: a star per bucket,
    which connects each bucket with len - 1 edges."""
    if sorted_keys.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(sorted_keys.size), 0))
    linked = ~starts
    return sorted_rows[linked].astype(np.int64), sorted_rows[first[linked]].astype(np.int64)


def partition_bits(n: int, budget: int) -> int:
    """log2 of the number of key ranges a band of `n` documents is sorted in, so that each
    range holds about n / 2^bits <= `budget` entries: keys are uniform 64-bit hashes, so
    their top bits split a band evenly."""
    parts = max(1, -(-n // max(budget, 1)))
    return (parts - 1).bit_length()


def key_range(part: int, bits: int) -> tuple[int, int | None]:
    """[lo, hi) of the keys of range `part` (hi None: up to the largest key)."""
    if bits == 0:
        return 0, None
    shift = 64 - bits
    return part << shift, ((part + 1) << shift) if part + 1 < (1 << bits) else None


def in_range(keys: np.ndarray, part: int, bits: int) -> np.ndarray:
    if bits == 0:
        return np.ones(keys.size, dtype=bool)
    return (keys >> np.uint64(64 - bits)) == np.uint64(part)


def read_band(paths: Sequence[str | Path], row_starts: Sequence[int], band: int, part: int = 0,
              bits: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(keys, rows) of one band's key range over every file (file i's rows numbered from
    row_starts[i]): one column is read per file, and only the range's entries are kept,
    so memory is one file's column plus the range."""
    col = band_column(band)
    ks, rs = [np.empty(0, np.uint64)], [np.empty(0, np.int64)]
    for path, start in zip(paths, row_starts):
        k = pq.read_table(path, columns=[col])[col].to_numpy().astype(np.uint64, copy=False)
        idx = np.flatnonzero(in_range(k, part, bits))
        ks.append(k[idx])
        rs.append(idx.astype(np.int64) + int(start))
    return np.concatenate(ks), np.concatenate(rs)


def _count_rows(paths: Sequence[str | Path]) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def band_job(paths: Sequence[str | Path], row_starts: Sequence[int], band: int, out: Path | None,
             previous: Path | None = None, budget: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """Sort one band and return its edges; write it to `out` (key, row: the persisted index).

    With `previous` (that band's persisted file), only the new files' keys are read and
    queried against it (`query_band`), and the merged band is written. Either way the band
    is processed in key ranges of at most about `budget` entries (`partition_bits`), in
    key order, so the file comes out sorted and memory does not grow with the corpus."""
    n = _count_rows(paths) + (pq.ParquetFile(previous).metadata.num_rows if previous else 0)
    bits = partition_bits(n, budget)
    writer = pq.ParquetWriter(out, _BAND_SCHEMA, compression="zstd") if out is not None else None
    edges_a, edges_b = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    try:
        for part in range(1 << bits):
            keys, rows = read_band(paths, row_starts, band, part, bits)
            if previous is None:
                sk, sr = sort_band(keys, rows)
                a, b = bucket_edges(sk, sr)
            else:
                ok, orows = load_band(previous, key_range(part, bits))
                (a, b), (sk, sr) = query_band(ok, orows, keys, rows)
            edges_a.append(a)
            edges_b.append(b)
            if writer is not None:
                writer.write_table(_band_table(sk, sr), row_group_size=BAND_ROW_GROUP)
    finally:
        if writer is not None:
            writer.close()
    return np.concatenate(edges_a), np.concatenate(edges_b)


BAND_ROW_GROUP = 65_536  # rows per row group of a band file: what a key-range read skips by
_BAND_SCHEMA = pa.schema([("key", pa.uint64()), ("row", pa.uint32())])


def _band_table(keys: np.ndarray, rows: np.ndarray) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.uint64()), "row": pa.array(rows.astype(np.uint32))},
                    schema=_BAND_SCHEMA)


def load_band(path: Path, keys: tuple[int, int | None] = (0, None)) -> tuple[np.ndarray, np.ndarray]:
    """A persisted band's (keys, rows) in [lo, hi): row groups outside it are skipped by
    their statistics (the file is sorted by key)."""
    lo, hi = keys
    # uint64 scalars: a plain int above 2^63 would be taken as int64 and rejected
    expr = pc.field("key") >= pa.scalar(lo, pa.uint64())
    if hi is not None:
        expr = expr & (pc.field("key") < pa.scalar(hi, pa.uint64()))
    t = pq.read_table(path, filters=expr if lo or hi is not None else None)
    return t["key"].to_numpy().astype(np.uint64, copy=False), t["row"].to_numpy().astype(np.int64)


def query_band(old_keys: np.ndarray, old_rows: np.ndarray, new_keys: np.ndarray,
               new_rows: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """New documents against a persisted band: (edges, merged sorted (keys, rows)).

    A new document that hits an old bucket links to that bucket's first member (found by
    `searchsorted`, no rebuild); new documents sharing a bucket only among themselves link
    as `bucket_edges` would. Rows of new documents are all above the old ones, so the
    merged band is what a full build would have sorted."""
    nk, nr = sort_band(new_keys, new_rows)
    pos = np.searchsorted(old_keys, nk)
    hit = (pos < old_keys.size) & (old_keys[np.minimum(pos, max(old_keys.size - 1, 0))] == nk) \
        if old_keys.size else np.zeros(nk.size, bool)
    a1, b1 = nr[hit], old_rows[pos[hit]]
    a2, b2 = bucket_edges(nk[~hit], nr[~hit])
    keys = np.concatenate([old_keys, nk])
    rows = np.concatenate([old_rows, nr])
    order = np.lexsort((rows, keys))
    return (np.r_[a1, a2], np.r_[b1, b2]), (keys[order], rows[order])


def components(n: int, edges: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Label per row: its connected component over `edges`, -1 for a row in none."""
    a = np.concatenate([e[0] for e in edges]) if edges else np.empty(0, np.int64)
    b = np.concatenate([e[1] for e in edges]) if edges else np.empty(0, np.int64)
    if n == 0:
        return np.empty(0, np.int64)
    graph = coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    sizes = np.bincount(comp)
    return np.where(sizes[comp] > 1, comp, -1).astype(np.int64)


def keepers(labels: np.ndarray, doc_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Keeper row per row: the member with the smallest doc_id of its cluster (itself for
    rows in no cluster), from every row's doc_id."""
    multi = np.flatnonzero(labels >= 0)
    ids = pa.chunked_array([doc_ids]) if isinstance(doc_ids, pa.Array) else doc_ids
    return cluster_keepers(labels, ids.take(pa.array(multi)) if multi.size else pa.chunked_array([], pa.string()))


def cluster_keepers(labels: np.ndarray, clustered_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """`keepers` from the doc_ids of the clustered rows alone (`labels >= 0`, in row order):
    all it needs, and a small part of the corpus' doc_ids, in polars."""
    keeper = np.arange(labels.size, dtype=np.int64)
    multi = np.flatnonzero(labels >= 0)
    if multi.size == 0:
        return keeper
    df = pl.DataFrame({"row": multi, "label": labels[multi], "doc_id": pl.Series(clustered_ids)})
    best = df.sort("doc_id", "row").group_by("label", maintain_order=True).first()
    joined = df.select("row", "label").join(best.select("label", pl.col("row").alias("keeper")), on="label")
    keeper[joined["row"].to_numpy()] = joined["keeper"].to_numpy()
    return keeper


def cluster_edges(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A star per cluster (member, cluster's first row): persisted labels as edges, so an
    incremental run joins old clusters with new edges in one components() call."""
    multi = np.flatnonzero(labels >= 0)
    lab = labels[multi]
    order = np.lexsort((multi, lab))
    m, lab = multi[order], lab[order]
    starts = np.r_[True, lab[1:] != lab[:-1]] if lab.size else np.empty(0, bool)
    first = np.maximum.accumulate(np.where(starts, np.arange(lab.size), 0)) if lab.size else np.empty(0, np.int64)
    return m[~starts], m[first[~starts]]
