"""Recall and precision of the dedup on the scale benchmark's planted near-duplicate pairs.

What the pipeline decided is read where a user reads it: the `near_duplicate` rejections
of `deduped_documents`. Recall is the share of planted pairs (both kept by the filters)
that end in one cluster, by Jaccard bucket, beside the LSH's expected probability;
precision the share of removals that are right, planted ones exactly and the others from
a checked sample. The definitions: docs/benchmarks.md#read-to-dedup-at-1m-documents-bench_scale.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl

from bench.scale_corpus import jaccard

_SEP = ": near-duplicate of "
BUCKETS = (0.0, 0.8, 0.85, 0.9, 0.95, 1.01)
TRUE_NEAR = 0.5


def removals(home: Path) -> pl.DataFrame:
    """(source, keeper_source) of every document removed as a near-duplicate."""
    files = sorted((home / "data" / "rejected_documents").glob("*/dedup.parquet"))
    if not files:
        raise FileNotFoundError(f"no dedup rejections under {home}/data/rejected_documents")
    rej = pl.concat([pl.read_parquet(f, columns=["source", "reason", "detail"]) for f in files])
    rej = rej.filter(pl.col("reason") == "near_duplicate")
    keeper = rej["detail"].str.split_exact(_SEP, 1).struct.field("field_1")
    if rej.height and keeper.null_count() == rej.height:
        raise ValueError(f"near_duplicate details no longer read '<source>{_SEP}<keeper source>'")
    return pl.DataFrame({"source": rej["source"], "keeper": keeper})


def score(home: Path, truth_path: Path, seed: int = 0, sample: int = 500, bands: int = 14, rows: int = 8) -> dict:
    filtered = pl.scan_parquet(str(home / "data" / "filtered_documents" / "*" / "part-0.parquet"))
    kept = filtered.select("source").collect()
    removed = removals(home)
    cluster = dict(zip(removed["source"].to_list(), removed["keeper"].to_list()))
    truth = pl.read_parquet(truth_path)
    alive = (truth.join(kept, left_on="source_a", right_on="source", how="semi")
             .join(kept, left_on="source_b", right_on="source", how="semi"))
    a, b = alive["source_a"].to_list(), alive["source_b"].to_list()
    found = np.array([cluster.get(x, x) == cluster.get(y, y) for x, y in zip(a, b)], dtype=bool)
    j = alive["jaccard"].to_numpy()
    expected = 1 - (1 - j**rows) ** bands
    by_bucket = []
    for lo, hi in itertools.pairwise(BUCKETS):
        m = (j >= lo) & (j < hi)
        if m.any():
            by_bucket.append({"jaccard": f"[{lo:.2f}, {min(hi, 1.0):.2f})", "pairs": int(m.sum()),
                              "recall": round(float(found[m].mean()), 4),
                              "expected": round(float(expected[m].mean()), 4)})
    right = {s for x, y, f in zip(a, b, found) if f for s in (x, y) if s in cluster}
    others = [s for s in cluster if s not in right]
    rng = np.random.default_rng(seed)
    pick = [others[i] for i in rng.choice(len(others), size=min(sample, len(others)), replace=False)]
    sims = _jaccards(filtered, [(s, cluster[s]) for s in pick])
    share = float(np.mean([x >= TRUE_NEAR for x in sims])) if sims else 1.0
    n_removed = len(cluster)
    precision = (len(right) + share * len(others)) / n_removed if n_removed else 1.0
    return {
        "planted_pairs": truth.height, "pairs_both_kept": alive.height, "pairs_found": int(found.sum()),
        "recall": round(float(found.mean()), 4) if found.size else None,
        "recall_expected_lsh": round(float(expected.mean()), 4) if found.size else None,
        "recall_by_jaccard": by_bucket,
        "removed_near_duplicates": n_removed, "removed_in_found_pairs": len(right),
        "removed_other": len(others), "other_sampled": len(pick),
        "other_sampled_true_share": round(share, 4),
        "other_sampled_jaccard_median": round(float(np.median(sims)), 4) if sims else None,
        "precision": round(precision, 4),
    }


def _jaccards(filtered: pl.LazyFrame, pairs: list[tuple[str, str]]) -> list[float]:
    if not pairs:
        return []
    wanted = sorted({s for p in pairs for s in p})
    texts = dict(filtered.join(pl.LazyFrame({"source": wanted}), on="source", how="semi").select("source", "text").collect().iter_rows())
    return [jaccard(texts[x], texts[y]) for x, y in pairs if x in texts and y in texts]
