"""Dedup stages: per-shard signatures, the whole-corpus index, per-shard deduped output.

A new shard only needs its own signatures (with its LSH band keys as columns); the index
is built band by band from those columns (`pipelines.data.dedup.index`), and extended
rather than rebuilt when the only change is new shards. A shard's deduped output reads
only its own rows of the index and is cached under a digest of *its own* decisions, so
old shards whose decisions did not change are not rewritten when a new shard lands.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.data.dedup.clusters import batch_paragraphs, drop_lines, estimated_jaccard_pairs
from pipelines.data.dedup.index import ShardInput, build_index, read_shard_rows
from pipelines.data.dedup.lsh_index import band_column, band_keys
from pipelines.data.dedup.minhash import compute_signatures
from pipelines.data.documents import FILTERED_SCHEMA, Rejection, rejections_table, text_bytes
from stages.asset_names import DEDUP_INDEX
from stages.config import YunqueConfig
from stages.store.keys import stage_key, upstream_key
from stages.store.outputs import DataStore, StageStats, drop_counts, read_table

INDEX_ASSET = DEDUP_INDEX


def minhash_key(cfg: YunqueConfig, filtered: str) -> str:
    return stage_key("minhash_signatures", cfg, ("dedup",), filtered)


def index_key(cfg: YunqueConfig, signatures: dict[str, str]) -> str:
    """dedup_index's key: the dedup settings and every consumed shard's signatures key."""
    return stage_key(INDEX_ASSET, cfg, ("dedup",), dict(sorted(signatures.items())))


def deduped_key(cfg: YunqueConfig, filtered: str, digest: str, quality: str) -> str:
    """deduped_documents' key: the shard's filtered documents, the index's digest of its
    decisions for that shard (known once the index is built) and quality_model's digest of
    the documents it drops there."""
    return stage_key("deduped_documents", cfg, ("dedup",), filtered, digest, quality)


def minhash_stage(store: DataStore, shard: str, cfg: YunqueConfig) -> StageStats:
    key = minhash_key(cfg, upstream_key(store, "filtered_documents", shard))
    with store.lock("minhash_signatures", shard):
        if hit := store.cached("minhash_signatures", shard, key):
            return hit
        d = cfg.dedup
        docs = read_table(store.part("filtered_documents", shard), ["doc_id", "source", "text"])
        text = docs["text"]  # an Arrow column all the way: no Python string per document
        sigs = compute_signatures(text, d)
        keys = band_keys(sigs, d)
        # characters per line, so the index can tell which documents paragraph removal empties
        paras, chars = batch_paragraphs(text, d.min_paragraph_chars)
        table = pa.table({
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "signature": pa.FixedSizeListArray.from_arrays(pa.array(sigs.ravel(), pa.uint32()), d.num_perm),
            # one column per LSH band: the index reads a band at a time (column projection)
            **{band_column(b): pa.array(keys[:, b], pa.uint64()) for b in range(d.bands)},
            "paragraph_hashes": paras,
            "line_chars": chars,
        })
        n_paras = int(pc.sum(pc.list_value_length(paras)).as_py() or 0)
        stats = StageStats(key=key, docs_in=docs.num_rows, docs_out=docs.num_rows,
                           extra={"num_perm": d.num_perm, "paragraphs": n_paras})
        store.commit("minhash_signatures", shard, stats, {"part-0.parquet": table})
        return stats


def _signatures(table: pa.Table, num_perm: int) -> np.ndarray:
    flat = table["signature"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(-1, num_perm).astype(np.uint32)


def dedup_index_stage(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> StageStats:
    """LSH clusters and paragraph decisions over `shards`, band by band from the signature
    files. When the only change since the last index is new shards (same config, same
    signatures of every old shard), their band keys are queried against the persisted
    index instead of rebuilding it; any other change rebuilds in full."""
    d = cfg.dedup
    upstream = {s: upstream_key(store, "minhash_signatures", s) for s in sorted(shards)}
    key = index_key(cfg, upstream)
    config = stage_key(INDEX_ASSET, cfg, ("dedup",))  # what decides whether an old index can be extended
    with store.lock(INDEX_ASSET):
        if hit := store.cached(INDEX_ASSET, None, key):
            return hit
        prev = store.manifest(INDEX_ASSET)
        # extended, not rebuilt, only from an index whose every byte is the one committed
        previous = store.dir(INDEX_ASSET) if prev and prev["stats"]["extra"].get("index_config") == config \
            and store.damage(INDEX_ASSET, full=True) is None else None
        inputs = [ShardInput(s, store.part("minhash_signatures", s), k) for s, k in upstream.items()]
        scratch = Path(tempfile.mkdtemp(dir=store.staging(), prefix="dedup_index."))
        try:
            res = build_index(inputs, d, scratch, previous, d.workers)
            names = sorted(p.name for p in scratch.iterdir())

            def move(directory: Path) -> list[str]:
                for name in names:
                    shutil.move(str(scratch / name), directory / name)
                return names

            stats = StageStats(
                key=key, docs_in=res.docs, docs_out=res.docs - res.removed, rejected=res.removed,
                drops={"near_duplicate": res.removed},
                extra={"shards": len(upstream), "clusters": res.clusters, "paragraph_docs": res.paragraph_docs,
                       "paragraphs_removed": res.paragraphs_removed, "incremental": res.incremental,
                       "shard_digests": res.digests, "shard_inputs": upstream, "bands": d.bands, "rows": d.rows,
                       "index_config": config},
            )
            store.commit(INDEX_ASSET, None, stats, {}, write=move)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
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
    current = minhash_key(cfg, filtered_key)
    if extra.get("shard_inputs", {}).get(shard) != current:
        raise StaleIndexError(f"dedup_index was built from older signatures of {shard!r}; "
                              "re-materialize minhash_signatures and dedup_index first")
    from pipelines.data.quality import RULE
    from stages.data.quality import shard_decisions

    quality = shard_decisions(store, shard, filtered_key)  # raises StaleQualityError
    key = deduped_key(cfg, filtered_key, digest, quality[0] if quality else "off")
    low, threshold = (quality[1], quality[2]) if quality else ({}, 0.0)
    with store.lock("deduped_documents", shard):
        if hit := store.cached("deduped_documents", shard, key):
            return hit
        docs = read_table(store.part("filtered_documents", shard))
        idir = store.verified(INDEX_ASSET)
        # only this shard's rows of the index (row-group statistics skip the others)
        near = {r["doc_id"]: r for r in read_shard_rows(idir / "near_duplicates.parquet", shard).to_pylist()}
        para = {r["doc_id"]: r for r in read_shard_rows(idir / "paragraph_drops.parquet", shard).to_pylist()}
        min_chars = cfg.dedup.min_chars_after_paragraph_dedup
        keep_rows, rejections, removed_lines = [], [], 0
        for row in docs.to_pylist():
            if (score := low.get(row["doc_id"])) is not None:
                rejections.append(Rejection(row["doc_id"], shard, row["source"], "quality", RULE,
                                            f"{row['source']}: learned quality score {score:.2g} < {threshold:.2g}",
                                            row["text"]))
                continue
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
                           bytes_in=text_bytes(docs), bytes_out=text_bytes(kept), drops=drop_counts(reasons),
                           extra={"paragraphs_removed": removed_lines})
        store.commit("deduped_documents", shard, stats, {"part-0.parquet": kept},
                     side={store.rejected(shard, "dedup"): rejections_table(rejections)})
        return stats


def near_duplicate_sample_pairs(store: DataStore, shards: Sequence[str], cfg: YunqueConfig, seed: int = 0):
    """Pairs among a sample of kept documents whose estimated Jaccard >= check_jaccard.
    Reads doc_ids to find the kept rows, then only the sampled rows' signatures, shard by
    shard: memory is the sample's, not the corpus' signatures."""
    d = cfg.dedup
    removed = read_table(store.verified(INDEX_ASSET) / "near_duplicates.parquet", ["doc_id"])["doc_id"]
    kept: list[tuple[str, np.ndarray]] = []
    for s in sorted(shards):
        ids = read_table(store.part("minhash_signatures", s), ["doc_id"])["doc_id"]
        kept.append((s, np.flatnonzero(~pc.is_in(ids, value_set=removed).to_numpy(zero_copy_only=False))))
    total = sum(k.size for _, k in kept)
    if not total:
        return 0, []
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(total, size=min(d.check_sample_size, total), replace=False))
    ids_out: list[str] = []
    sigs: list[np.ndarray] = []
    first = 0
    for s, rows in kept:
        mine = pick[(pick >= first) & (pick < first + rows.size)] - first
        first += rows.size
        if mine.size:
            t = read_table(store.part("minhash_signatures", s), ["doc_id", "signature"]).take(pa.array(rows[mine]))
            ids_out += t["doc_id"].to_pylist()
            sigs.append(_signatures(t, d.num_perm))
    pairs = estimated_jaccard_pairs(np.concatenate(sigs), d.check_jaccard)
    return len(pick), [(ids_out[i], ids_out[j], est) for i, j, est in pairs]
