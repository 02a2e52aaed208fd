"""Our MinHash + LSH against datatrove's four-stage MinHash pipeline, on the same documents;
with --signatures, our signatures against rensa's (Rust) alone.

    python -m bench.bench_minhash [--input GLOB] [--limit N] [--rounds N] [--signatures]
                                  [--precision 32|64] [--crosscheck] [--profile]

--signatures: ours (with our normalisation, from Python strings and from the Arrow column
the stage reads) against rensa 0.5's `RMinHash` (same 112 permutations, word 5-grams
built in Python from `str.split`, and again from `normalize_for_dedup`), interleaved;
the ratios are rensa seconds / ours seconds.

Both sides start from texts in memory (the parquet is read once, before either clock):
ours gets the strings, datatrove a list of `Document`s (built outside its clock) yielded
by its first pipeline step, so no reader is timed on either side. All that datatrove then
does (signature files, sorting, bucket merge, union-find, .remove files, the filter pass,
its logs, the executor's manager process) counts: that is what running it costs. The two
run in interleaved rounds (bench.common.interleaved), one warm-up call each first; the
per-round ratio's median and spread are reported. Agreement figures use the last round.

This module parses the arguments, times both sides and prints; datatrove's pipeline is set
up in bench/minhash_datatrove.py, the agreement figures are computed in bench/minhash_compare.py.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time

import numpy as np

from bench.common import Clocked, default_glob, interleaved, load_texts
from bench.minhash_compare import (
    co_pairs,
    explain,
    fmt,
    groups,
    jaccard,
    ours_groups_removed,
    same_groups,
)
from bench.minhash_datatrove import datatrove_signatures, run_datatrove
from pipelines.config import DedupConfig
from pipelines.data.dedup import Clusters, lsh_clusters
from pipelines.data.minhash import EMPTY, compute_signatures, normalize_for_dedup


def rensa_signatures(texts: list[str], cfg: DedupConfig, normalise: bool) -> np.ndarray:
    """rensa's RMinHash over word n-grams joined by spaces (how its README shingles)."""
    from rensa import RMinHash

    out = np.full((len(texts), cfg.num_perm), EMPTY, dtype=np.uint32)
    n = cfg.ngram
    for i, t in enumerate(texts):
        w = normalize_for_dedup(t) if normalise else t.split()
        if w:
            m = RMinHash(num_perm=cfg.num_perm, seed=cfg.seed)
            m.update([" ".join(w[j : j + n]) for j in range(max(len(w) - n + 1, 1))])
            out[i] = m.digest()
    return out


def signatures_vs_rensa(texts: list[str], cfg: DedupConfig, rounds: int) -> None:
    import pyarrow as pa

    column = pa.array(texts, pa.large_string())  # built before any clock, as the stage's read is
    cases = {
        "ours": lambda: compute_signatures(texts, cfg),
        "ours_arrow": lambda: compute_signatures(column, cfg),
        "rensa": lambda: rensa_signatures(texts, cfg, False),
        "rensa_our_norm": lambda: rensa_signatures(texts, cfg, True),
    }
    res = interleaved(cases, rounds)
    res.report("rensa", "docs/s", work=len(texts), compare=["ours", "ours_arrow", "rensa_our_norm"],
               title=f"{rounds} interleaved rounds, one warm-up each (ratios: rensa seconds / case seconds):")


def run_ours(doc_ids: list[str], texts: list[str], cfg: DedupConfig) -> tuple[dict, Clusters]:
    t0 = time.perf_counter()
    sigs = compute_signatures(texts, cfg)
    t1 = time.perf_counter()
    clusters = lsh_clusters(sigs, doc_ids, cfg)
    t2 = time.perf_counter()
    return {"signatures": t1 - t0, "lsh": t2 - t1, "total": t2 - t0}, clusters




def profile_ours(doc_ids: list[str], texts: list[str], cfg: DedupConfig, top: int = 15) -> None:
    prof = cProfile.Profile()
    prof.enable()
    lsh_clusters(compute_signatures(texts, cfg), doc_ids, cfg)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=default_glob("filtered_documents"))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=9,
                    help="interleaved rounds (ours, datatrove, rotating)")
    # 32 mirrors ours (32-bit shingle hashes, permutations masked to 32 bits)
    ap.add_argument("--precision", type=int, choices=(32, 64), default=32)
    ap.add_argument("--crosscheck", action="store_true", help="our LSH on datatrove's sigs")
    ap.add_argument("--profile", action="store_true", help="cProfile our side afterwards")
    ap.add_argument("--signatures", action="store_true", help="signatures only: ours against rensa")
    args = ap.parse_args(argv)

    doc_ids, texts = load_texts(args.input, args.limit)
    if len(set(doc_ids)) != len(doc_ids):
        raise SystemExit("doc_id is not unique in the input")
    cfg = DedupConfig()
    n = len(texts)
    print(f"{n} documents, {sum(map(len, texts)) / 1e6:.1f} M characters from {args.input}")
    if args.signatures:
        return signatures_vs_rensa(texts, cfg, args.rounds)

    stages: dict[str, list[dict[str, float]]] = {"ours": [], "datatrove": []}

    def ours() -> Clocked:
        t, cl = run_ours(doc_ids, texts, cfg)
        stages["ours"].append(t)
        return Clocked(t["total"], cl)

    def theirs() -> Clocked:
        with tempfile.TemporaryDirectory(prefix="bench_minhash_") as tmp:  # setup: not timed
            t, assign, kept = run_datatrove(doc_ids, texts, cfg, tmp, args.precision)
        stages["datatrove"].append(t)
        return Clocked(t["total"], (assign, kept))

    # Rounds alternate which side goes first, so a slow spell of the machine hits both
    # alike; the per-round ratio, its median and spread are what to quote.
    rounds = interleaved({"ours": ours, "datatrove": theirs}, args.rounds)
    cl, (dt_assign, dt_kept) = rounds.last["ours"], rounds.last["datatrove"]
    rounds.report("datatrove", "docs/s", work=n, title=f"{args.rounds} interleaved rounds, after one warm-up "
                  f"each ({args.precision}-bit datatrove; ratios: datatrove seconds / ours seconds, > 1: ours faster):")
    t_ours, t_dt = ({k: statistics.median(t[k] for t in stages[side][1:]) for k in stages[side][0]}
                    for side in ("ours", "datatrove"))  # [1:]: not the warm-up

    ours_groups, ours_removed = ours_groups_removed(cl, doc_ids)
    ours_assign = {d for g in ours_groups for d in g}
    dt_removed = set(doc_ids) - dt_kept
    dt_groups = groups(dt_assign)
    # datatrove keeps its union-find root, not the smallest doc_id; removing "all but the
    # min doc_id" of its clusters separates clustering differences from keeper choice.
    dt_removed_min = {d for g in dt_groups for d in g if d != min(g)}

    print(f"median stage seconds: ours {fmt(t_ours)}; datatrove {fmt(t_dt)}")
    print(f"clusters (size >= 2), ours / datatrove: {same_groups(ours_groups, dt_groups)}")
    print(f"removed: ours {len(ours_removed)}, datatrove {len(dt_removed)}")
    print(f"Jaccard of removed sets: {jaccard(ours_removed, dt_removed):.3f} as run,"
          f" {jaccard(ours_removed, dt_removed_min):.3f} with min-doc_id keepers on both")
    in_dt = sum(d in dt_assign for d in ours_removed)
    print(f"ours removed that are in a datatrove cluster: {in_dt}/{len(ours_removed)}; datatrove removed in"
          f" one of ours: {sum(d in ours_assign for d in dt_removed)}/{len(dt_removed)}")
    po, pd = co_pairs(ours_groups), co_pairs(dt_groups)
    print(f"same-cluster pairs: ours {len(po)}, datatrove {len(pd)}, both {len(po & pd)}")
    # Chance baseline: the same method with other random permutations.
    other = lsh_clusters(compute_signatures(texts, DedupConfig(seed=2)), doc_ids, cfg)
    o_groups, o_removed = ours_groups_removed(other, doc_ids)
    print(f"ours seed 1 vs seed 2: {same_groups(ours_groups, o_groups)}, removed-set"
          f" Jaccard {jaccard(ours_removed, o_removed):.3f}")
    if args.crosscheck and args.precision == 32:
        # Our LSH + union on datatrove's own signatures must give datatrove's clusters.
        x = lsh_clusters(datatrove_signatures(texts, cfg), doc_ids, cfg)
        x_groups = ours_groups_removed(x, doc_ids)[0]
        print(f"our lsh_clusters on datatrove's sigs: {same_groups(x_groups, dt_groups)}")
    text_of = dict(zip(doc_ids, texts))
    explain(po - pd, text_of, cfg.ngram, "linked by ours only")
    explain(pd - po, text_of, cfg.ngram, "linked by datatrove only")
    if args.profile:
        profile_ours(doc_ids, texts, cfg)


if __name__ == "__main__":
    main()
