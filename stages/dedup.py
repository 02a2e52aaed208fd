"""Dedup stages: per-shard signatures, the whole-corpus index, per-shard deduped output.

A new shard only needs its own signatures; the index re-joins stored signatures of all
shards (cheap: LSH over 112 ints per document), and a shard's deduped output is cached
under a digest of *its own* drop lists, so old shards whose decisions did not change are
not rewritten when a new shard lands.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from pipelines.data.dedup import (
    drop_lines,
    estimated_jaccard_pairs,
    lsh_clusters,
    paragraph_drops,
    paragraph_hashes,
)
from pipelines.data.documents import Rejection, rejections_table
from pipelines.data.minhash import compute_signatures
from stages.config import YunqueConfig
from stages.ingest import FILTERED_SCHEMA, _bytes, _key, upstream_key
from stages.store import DataStore, StageStats, cache_key, drop_counts, read_table

INDEX_ASSET = "dedup_index"


def minhash_stage(store: DataStore, shard: str, cfg: YunqueConfig) -> StageStats:
    key = _key("minhash_signatures", cfg, ("dedup",), upstream_key(store, "filtered_documents", shard))
    with store.lock("minhash_signatures", shard):
        if hit := store.cached("minhash_signatures", shard, key):
            return hit
        docs = read_table(store.part("filtered_documents", shard), ["doc_id", "source", "text"])
        texts = docs["text"].to_pylist()
        sigs = compute_signatures(texts, cfg.dedup)
        paras = [paragraph_hashes(t, cfg.dedup.min_paragraph_chars) for t in texts]
        # characters per line, so the index can tell which documents paragraph removal empties
        chars = [[len(line.strip()) for line in t.split("\n")] for t in texts]
        table = pa.table({
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "signature": pa.FixedSizeListArray.from_arrays(pa.array(sigs.ravel(), pa.uint32()), cfg.dedup.num_perm),
            "paragraph_hashes": pa.array(paras, pa.list_(pa.uint64())),
            "line_chars": pa.array(chars, pa.list_(pa.int32())),
        })
        stats = StageStats(key=key, docs_in=docs.num_rows, docs_out=docs.num_rows,
                           extra={"num_perm": cfg.dedup.num_perm, "paragraphs": sum(len(p) for p in paras)})
        store.commit("minhash_signatures", shard, stats, {"part-0.parquet": table})
        return stats


def _signatures(table: pa.Table, num_perm: int) -> np.ndarray:
    flat = table["signature"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(-1, num_perm).astype(np.uint32)


def dedup_index_stage(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> StageStats:
    d = cfg.dedup
    upstream = {s: upstream_key(store, "minhash_signatures", s) for s in sorted(shards)}
    key = _key(INDEX_ASSET, cfg, ("dedup",), upstream)
    with store.lock(INDEX_ASSET):
        if hit := store.cached(INDEX_ASSET, None, key):
            return hit
        parts = []
        for s in sorted(shards):
            t = read_table(store.part("minhash_signatures", s))
            parts.append(t.append_column("shard", pa.array([s] * t.num_rows, pa.string())))
        table = pa.concat_tables(parts) if parts else None
        n = table.num_rows if table is not None else 0
        doc_ids = table["doc_id"].to_pylist() if n else []
        sources = table["source"].to_pylist() if n else []
        doc_shards = table["shard"].to_pylist() if n else []
        sigs = _signatures(table, d.num_perm) if n else np.empty((0, d.num_perm), np.uint32)
        clusters = lsh_clusters(sigs, doc_ids, d)
        removed = clusters.to_remove
        near = pa.table({
            "doc_id": [doc_ids[i] for i in removed],
            "shard": [doc_shards[i] for i in removed],
            "keeper_doc_id": [doc_ids[clusters.keeper[i]] for i in removed],
            "keeper_source": [sources[clusters.keeper[i]] for i in removed],
        }, schema=pa.schema([("doc_id", pa.string()), ("shard", pa.string()),
                             ("keeper_doc_id", pa.string()), ("keeper_source", pa.string())]))
        survivors = np.setdiff1d(np.arange(n), removed)
        para_lists = table["paragraph_hashes"].to_pylist() if n else []
        char_lists = table["line_chars"].to_pylist() if n else []
        pdrops, too_short = paragraph_drops(
            [doc_ids[i] for i in survivors], [para_lists[i] for i in survivors],
            [char_lists[i] for i in survivors], d.min_chars_after_paragraph_dedup,
        ) if d.paragraph_dedup else ({}, set())
        pd_rows = [(doc_ids[survivors[k]], doc_shards[survivors[k]], v, k in too_short) for k, v in sorted(pdrops.items())]
        paragraphs = pa.table({
            "doc_id": [r[0] for r in pd_rows], "shard": [r[1] for r in pd_rows],
            "line_indices": pa.array([r[2] for r in pd_rows], pa.list_(pa.int32())),
            "reject": pa.array([r[3] for r in pd_rows], pa.bool_()),
        }, schema=pa.schema([("doc_id", pa.string()), ("shard", pa.string()),
                             ("line_indices", pa.list_(pa.int32())), ("reject", pa.bool_())]))
        # Per-shard digest of the decisions: deduped_documents of a shard is cached on it.
        near_by_shard: dict[str, list] = {s: [] for s in upstream}
        for a, sh, b in zip(near["doc_id"].to_pylist(), near["shard"].to_pylist(), near["keeper_doc_id"].to_pylist()):
            near_by_shard[sh].append((a, b))
        para_by_shard: dict[str, list] = {s: [] for s in upstream}
        for doc, sh, lines, reject in pd_rows:
            para_by_shard[sh].append((doc, lines, reject))
        digests = {s: cache_key(sorted(near_by_shard[s]), sorted(para_by_shard[s])) for s in upstream}
        stats = StageStats(
            key=key, docs_in=n, docs_out=n - len(removed), rejected=len(removed),
            drops={"near_duplicate": len(removed)},
            extra={"shards": len(upstream), "clusters": clusters.n_clusters,
                   "paragraph_docs": len(pd_rows), "paragraphs_removed": sum(len(r[2]) for r in pd_rows),
                   "shard_digests": digests, "shard_inputs": upstream, "bands": d.bands, "rows": d.rows},
        )
        store.commit(INDEX_ASSET, None, stats, {"near_duplicates.parquet": near, "paragraph_drops.parquet": paragraphs})
        return stats


class StaleIndexError(ValueError):
    """The dedup index does not cover this shard's current signatures (yet)."""


def deduped_stage(store: DataStore, shard: str, cfg: YunqueConfig) -> StageStats:
    index = store.manifest(INDEX_ASSET)
    if index is None:
        raise StaleIndexError("dedup_index has not been materialized yet")
    extra = index["stats"]["extra"]
    digest = extra["shard_digests"].get(shard)
    if digest is None:
        raise StaleIndexError(f"shard {shard!r} is not in the dedup index; materialize dedup_index after its signatures")
    # The index's line numbers refer to the texts its signatures were computed from: if the
    # shard was re-filtered since, applying them would cut the wrong lines.
    filtered_key = upstream_key(store, "filtered_documents", shard)
    current = _key("minhash_signatures", cfg, ("dedup",), filtered_key)
    if extra.get("shard_inputs", {}).get(shard) != current:
        raise StaleIndexError(f"dedup_index was built from older signatures of {shard!r}; "
                              "re-materialize minhash_signatures and dedup_index first")
    key = _key("deduped_documents", cfg, ("dedup",), filtered_key, digest)
    with store.lock("deduped_documents", shard):
        if hit := store.cached("deduped_documents", shard, key):
            return hit
        docs = read_table(store.part("filtered_documents", shard))
        idir = store.dir(INDEX_ASSET)
        near = read_table(idir / "near_duplicates.parquet").to_pylist()
        near = {r["doc_id"]: r for r in near if r["shard"] == shard}
        para = {r["doc_id"]: r for r in read_table(idir / "paragraph_drops.parquet").to_pylist()
                if r["shard"] == shard}
        min_chars = cfg.dedup.min_chars_after_paragraph_dedup
        keep_rows, rejections, removed_lines = [], [], 0
        for row in docs.to_pylist():
            if (hit := near.get(row["doc_id"])) is not None:
                rejections.append(Rejection(row["doc_id"], shard, row["source"], "dedup", "near_duplicate",
                                            f"{row['source']}: near-duplicate of {hit['keeper_source']}", row["text"]))
                continue
            if (drop := para.get(row["doc_id"])) is not None:
                lines = drop["line_indices"]
                new = drop_lines(row["text"], lines)
                removed_lines += len(lines)
                if drop["reject"]:  # decided by the index, which let a later copy keep the paragraphs
                    rejections.append(Rejection(row["doc_id"], shard, row["source"], "dedup", "duplicate_paragraphs",
                                                f"{row['source']}: {len(lines)} paragraphs seen in other documents; "
                                                f"{len(new.strip())} chars left < {min_chars}", row["text"]))
                    continue
                row["text"] = new
            keep_rows.append(row)
        kept = pa.Table.from_pylist(keep_rows, schema=FILTERED_SCHEMA)
        reasons = [r.reason for r in rejections]
        stats = StageStats(key=key, docs_in=docs.num_rows, docs_out=kept.num_rows, rejected=len(rejections),
                           bytes_in=_bytes(docs), bytes_out=_bytes(kept), drops=drop_counts(reasons),
                           extra={"paragraphs_removed": removed_lines})
        store.commit("deduped_documents", shard, stats, {"part-0.parquet": kept},
                     side={store.rejected(shard, "dedup"): rejections_table(rejections)})
        return stats


def near_duplicate_sample_pairs(store: DataStore, shards: Sequence[str], cfg: YunqueConfig, seed: int = 0):
    """Pairs among a sample of kept documents whose estimated Jaccard >= check_jaccard."""
    d = cfg.dedup
    idir = store.dir(INDEX_ASSET)
    removed = set(read_table(idir / "near_duplicates.parquet", ["doc_id"])["doc_id"].to_pylist())
    ids, sigs = [], []
    for s in sorted(shards):
        t = read_table(store.part("minhash_signatures", s), ["doc_id", "signature"])
        keep = [i for i, x in enumerate(t["doc_id"].to_pylist()) if x not in removed]
        t = t.take(pa.array(keep, pa.int64()))
        ids += t["doc_id"].to_pylist()
        if t.num_rows:
            sigs.append(_signatures(t, d.num_perm))
    if not ids:
        return 0, []
    allsig = np.concatenate(sigs)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(ids), size=min(d.check_sample_size, len(ids)), replace=False))
    pairs = estimated_jaccard_pairs(allsig[pick], d.check_jaccard)
    return len(pick), [(ids[pick[i]], ids[pick[j]], est) for i, j, est in pairs]
