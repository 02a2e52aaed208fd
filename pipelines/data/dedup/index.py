"""The whole-corpus dedup index from per-shard signature files, full or incremental.

An index directory holds the shards' row ranges, one sorted file per LSH band, the
clusters, and two decision files sorted by shard in small row groups, so that a shard
reads only its own rows (`read_shard_rows`). Rows are integers in shard order: an
incremental build appends the new shards' rows, queries their band keys against the
persisted bands and joins the persisted clusters, since only clusters that touch new rows
can change. Files and columns: docs/data.md#deduplication.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.config import DedupConfig
from pipelines.data.dedup.clusters import paragraph_decisions
from pipelines.data.dedup.lsh_index import (
    band_column,
    band_job,
    cluster_edges,
    cluster_keepers,
    components,
    in_range,
    partition_bits,
)

ROW_GROUP = 4096  # rows per row group of the decision files: what a shard's filter skips by


@dataclass(frozen=True)
class ShardInput:
    name: str
    path: Path  # its minhash_signatures parquet
    key: str  # the cache key of that file: same key, same rows


@dataclass
class IndexResult:
    docs: int
    removed: int
    clusters: int
    paragraph_docs: int
    paragraphs_removed: int
    incremental: bool
    digests: dict[str, str]  # shard -> digest of its decisions


def _ranges(shards: Sequence[ShardInput], first: int) -> pl.DataFrame:
    lens = [pq.ParquetFile(s.path).metadata.num_rows for s in shards]
    starts = first + np.r_[0, np.cumsum(lens)[:-1]].astype(np.int64) if lens else np.empty(0, np.int64)
    return pl.DataFrame({"shard": [s.name for s in shards], "key": [s.key for s in shards],
                         "start": starts, "stop": starts + np.asarray(lens, dtype=np.int64)},
                        schema={"shard": pl.String, "key": pl.String, "start": pl.Int64, "stop": pl.Int64})


def _band_job(args: tuple) -> tuple[np.ndarray, np.ndarray]:
    paths, starts, band, out, previous, budget = args
    prev = previous / f"{band_column(band)}.parquet" if previous is not None else None
    return band_job(paths, starts, band, out, prev, budget)


def _run_bands(jobs: list[tuple], workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Bands are independent: one after another (memory: one band), or `workers` at once."""
    if workers <= 1:
        return [_band_job(j) for j in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_band_job, jobs))


def incremental_base(previous: Path | None, shards: Sequence[ShardInput]) -> pl.DataFrame | None:
    """The persisted row ranges if `shards` only adds shards to the previous index (same
    signatures for every old shard, at least one new); None means a full rebuild."""
    if previous is None or not (previous / "shards.parquet").exists():
        return None
    old = pl.read_parquet(previous / "shards.parquet")
    now = {s.name: s.key for s in shards}
    same = all(now.get(n) == k for n, k in zip(old["shard"], old["key"]))
    return old if same and len(now) > old.height else None


def build_index(shards: Sequence[ShardInput], cfg: DedupConfig, out: Path, previous: Path | None = None,
                workers: int = 1) -> IndexResult:
    """Write the index of `shards` to `out`; incremental from `previous` when it can be."""
    shards = sorted(shards, key=lambda s: s.name)
    base = incremental_base(previous, shards)
    if base is None:
        new, ranges, prev_dir = list(shards), _ranges(shards, 0), None
    else:
        new = [s for s in shards if s.name not in set(base["shard"])]
        ranges = pl.concat([base, _ranges(new, int(base["stop"].max() or 0))])
        prev_dir = previous
    nranges = ranges.filter(pl.col("shard").is_in([s.name for s in new]))
    paths, starts = [str(s.path) for s in new], nranges["start"].to_list()
    edges = _run_bands([(paths, starts, b, out / f"{band_column(b)}.parquet", prev_dir, cfg.band_partition_rows)
                        for b in range(cfg.bands)], workers)
    n = int(ranges["stop"].max() or 0)
    if prev_dir is not None:
        old = pq.read_table(prev_dir / "clusters.parquet")
        labels = np.full(n, -1, dtype=np.int64)
        labels[old["row"].to_numpy()] = old["label"].to_numpy()
        edges.append(cluster_edges(labels))
    labels = components(n, edges)
    ranges.write_parquet(out / "shards.parquet")
    multi = np.flatnonzero(labels >= 0)
    pq.write_table(pa.table({"row": pa.array(multi.astype(np.uint32)), "label": pa.array(labels[multi])}),
                   out / "clusters.parquet")

    order = ranges.sort("start")  # row order of the corpus, whatever order shards came in
    by_name = {s.name: s for s in shards}
    files = SignatureFiles([by_name[name].path for name in order["shard"]], order["start"].to_numpy(),
                   order["stop"].to_numpy())
    shard_names = pa.array(order["shard"].to_list(), pa.string())
    # Only the clustered rows' doc_ids decide keepers; the removed rows and their keepers
    # are among them.
    ids = files.take(multi, ["doc_id"])["doc_id"]
    keeper = cluster_keepers(labels, ids)
    removed = np.flatnonzero(keeper != np.arange(n))
    kept_by = keeper[removed]
    at = np.searchsorted(multi, removed), np.searchsorted(multi, kept_by)
    unique_keepers, back = np.unique(kept_by, return_inverse=True)
    near = pa.table({
        "doc_id": ids.take(pa.array(at[0])),
        "shard": shard_names.take(pa.array(files.shard_of(removed))),
        "keeper_doc_id": ids.take(pa.array(at[1])),
        "keeper_source": files.take(unique_keepers, ["source"])["source"].take(pa.array(back)),
    })
    paragraphs = _paragraphs(files, n, removed, shard_names, cfg) if n else _no_paragraphs()
    write_sorted(out / "near_duplicates.parquet", near)
    write_sorted(out / "paragraph_drops.parquet", paragraphs)
    return IndexResult(
        docs=n, removed=int(removed.size), clusters=int(np.unique(labels[multi]).size),
        paragraph_docs=paragraphs.num_rows,
        paragraphs_removed=int(pc.sum(pc.list_value_length(paragraphs["line_indices"])).as_py() or 0),
        incremental=prev_dir is not None, digests=shard_digests(ranges["shard"].to_list(), near, paragraphs))


class SignatureFiles:
    """The signature files in corpus row order, read a file and a column at a time: no
    column of the whole corpus is ever held, only what is taken from it."""

    def __init__(self, paths: list[Path], starts: np.ndarray, stops: np.ndarray):
        self.paths, self.starts, self.stops = paths, starts.astype(np.int64), stops.astype(np.int64)

    def shard_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, rows, side="right") - 1

    def local(self, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """(file, its local row numbers) for the files that hold any of `rows` (ascending)."""
        cuts = np.searchsorted(rows, np.r_[self.starts, self.stops[-1:]]) if len(self.paths) else []
        return [(i, rows[cuts[i]:cuts[i + 1]] - self.starts[i]) for i in range(len(self.paths))
                if cuts[i + 1] > cuts[i]]

    def take(self, rows: np.ndarray, columns: list[str]) -> pa.Table:
        """`columns` at `rows` (ascending global row numbers), in that order: one read of
        those columns per file that holds any of the rows."""
        if not self.paths:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        schema = pq.read_schema(self.paths[0])
        schema = pa.schema([schema.field(c) for c in columns])
        parts = [pq.read_table(self.paths[i], columns=columns).take(pa.array(local)) for i, local in self.local(rows)]
        return pa.Table.from_batches([b for t in parts for b in t.to_batches()], schema=schema)

    def columns(self, column: str):
        """(file's first row, the column of the file) for every file."""
        for path, start in zip(self.paths, self.starts):
            yield int(start), pq.read_table(path, columns=[column])[column]


def _no_paragraphs() -> pa.Table:
    return pa.table({"doc_id": pa.array([], pa.string()), "shard": pa.array([], pa.string()),
                     "line_indices": pa.array([], pa.list_(pa.int32())), "reject": pa.array([], pa.bool_())})


# Paragraph hashes counted in one pass at most (8 bytes each, a few times that while
# counted): a larger corpus is counted in passes over ranges of hash values.
HASHES_PER_PASS = 1 << 24


def _paragraphs(files: SignatureFiles, n: int, removed: np.ndarray, shard_names: pa.Array, cfg: DedupConfig) -> pa.Table:
    """Paragraph decisions among the documents that survive near-dedup, columnar, on the
    ones that share a paragraph hash (`sharing_documents`), read a file at a time."""
    if not cfg.paragraph_dedup:
        return _no_paragraphs()
    alive = np.ones(n, dtype=bool)
    alive[removed] = False
    survivors = sharing_documents(files, alive)  # ascending
    cols = files.take(survivors, ["doc_id", "paragraph_hashes", "line_chars"])
    ids = cols["doc_id"]
    rank = np.empty(survivors.size, dtype=np.int64)
    rank[pc.sort_indices(ids).to_numpy()] = np.arange(survivors.size)  # doc_id order among them, ties by row
    df = pl.DataFrame({
        "doc": survivors, "rank": rank,
        "paragraph_hashes": pl.Series(cols["paragraph_hashes"]),
        "line_chars": pl.Series(cols["line_chars"]),
    })
    out = paragraph_decisions(df, cfg.min_chars_after_paragraph_dedup)
    docs = out["doc"].to_numpy()
    at = pa.array(np.searchsorted(survivors, docs))
    return pa.table({
        "doc_id": ids.take(at), "shard": shard_names.take(pa.array(files.shard_of(docs))),
        "line_indices": out["line_indices"].to_arrow().cast(pa.list_(pa.int32())),
        "reject": out["reject"].to_arrow(),
    })


def _alive_hashes(column: pa.ChunkedArray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hash, local row) of the non-zero paragraph hashes of one file's `alive` rows."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    flat = pc.list_flatten(col).to_numpy()
    parent = pc.list_parent_indices(col).to_numpy()
    keep = (flat != 0) & alive[parent]
    return flat[keep].astype(np.uint64, copy=False), parent[keep]


def _hash_count(path: Path) -> int:
    """Paragraph hashes in a signature file (an empty list counts one): its leaf values."""
    meta = pq.ParquetFile(path).metadata
    cols = [j for j in range(meta.num_columns) if meta.schema.column(j).path.split(".")[0] == "paragraph_hashes"]
    return sum(meta.row_group(g).column(j).num_values for g in range(meta.num_row_groups) for j in cols)


def sharing_documents(files: SignatureFiles, alive: np.ndarray, per_pass: int = HASHES_PER_PASS) -> np.ndarray:
    """The `alive` rows with a paragraph hash that occurs at least twice among them.

    Only those can lose a line or hold one that another loses, so the fixpoint runs on
    them alone with the same result; in a corpus where few pages share paragraphs this
    keeps the exploded table, the index's largest, to a fraction of the corpus. The count
    is over lines, so a line repeated inside one page also qualifies it (a superset).
    Counting holds the hashes of one range of hash values at a time (`per_pass`), so
    memory stays flat as the corpus grows; then one more pass marks the rows."""
    lines = sum(_hash_count(path) for path in files.paths)  # from the files' metadata
    bits = partition_bits(lines, per_pass)
    shared = []
    for part in range(1 << bits):
        seen = []
        for start, column in files.columns("paragraph_hashes"):
            h, _ = _alive_hashes(column, alive[start:start + len(column)])
            seen.append(h[in_range(h, part, bits)])
        uniq, counts = np.unique(np.concatenate(seen) if seen else np.empty(0, np.uint64), return_counts=True)
        shared.append(uniq[counts > 1])
    shared_set = np.concatenate(shared) if shared else np.empty(0, np.uint64)
    rows = []
    for start, column in files.columns("paragraph_hashes"):
        h, parent = _alive_hashes(column, alive[start:start + len(column)])
        rows.append(np.unique(parent[np.isin(h, shared_set)]).astype(np.int64) + start)
    return np.concatenate(rows) if rows else np.empty(0, np.int64)


def write_sorted(path: Path, table: pa.Table, row_group_size: int = ROW_GROUP) -> None:
    """Sorted by (shard, doc_id) in small row groups: a reader filtering on one shard
    skips every other group by its statistics."""
    table = table.sort_by([("shard", "ascending"), ("doc_id", "ascending")])
    pq.write_table(table, path, row_group_size=row_group_size, compression="zstd")


def read_shard_rows(path: Path, shard: str, columns: list[str] | None = None) -> pa.Table:
    """One shard's rows of a decision file, by predicate pushdown."""
    return pq.read_table(path, columns=columns, filters=[("shard", "=", shard)])


def shard_digests(shards: Sequence[str], near: pa.Table, paragraphs: pa.Table) -> dict[str, str]:
    """Per shard, a digest of its decisions: deduped_documents of a shard is cached on it,
    so a shard whose decisions did not change is not rewritten."""
    out = {}
    frames = {}
    for name, t in (("near", near), ("para", paragraphs)):
        df = pl.from_arrow(t)
        frames[name] = df.sort("shard", "doc_id").partition_by("shard", as_dict=True) if df.height else {}
    for s in shards:
        h = hashlib.sha256()
        for name in ("near", "para"):
            part = frames[name].get((s,))
            if part is not None:
                if "line_indices" in part.columns:
                    part = part.with_columns(pl.col("line_indices").cast(pl.List(pl.String)).list.join(","))
                h.update(name.encode() + part.write_csv().encode())
        out[s] = h.hexdigest()[:20]
    return out
