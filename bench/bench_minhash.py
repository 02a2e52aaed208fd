"""MinHash, two comparisons, each in interleaved rounds (bench.common.interleaved: ratios
peer seconds / our seconds within each round, > 1: ours faster; median and spread).

    python -m bench.bench_minhash [--input GLOB] [--limit N] [--rounds N] [--quick]
        [--signatures] [--threads N] [--workers N] [--precision 32|64] [--crosscheck] [--profile]

Default: the whole near-duplicate dedup, files to files, ours (our stages) against
datatrove's MinHash pipeline, each with its own I/O. --signatures: signature computation
only, on the same shingle hashes, against rensa and datasketch. What each side runs:
docs/benchmarks.md#minhash-dedup-bench_minhash and the section after it.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import multiprocessing
import os
import pstats
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from bench.common import Clocked, Spread, default_glob, interleaved, load_texts

QUICK_LIMIT = 2000
QUICK_ROUNDS = 2


# --- signatures on the same shingles ---------------------------------------------------


def shingle_sets(texts: list[str], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(every document's distinct word n-gram hashes, sorted, flattened: uint32; int64
    offsets, len(texts) + 1): our normalisation and shingling, as compute_signatures does
    them. A document without words has no shingle."""
    import pyarrow as pa

    from pipelines.data.dedup.minhash import BATCH_DOCS, batch_shingles, text_batches
    from pipelines.data.words import batch_words

    flat, counts = [], []
    for batch in text_batches(pa.array(texts, pa.large_string()), BATCH_DOCS):
        wh, offsets = batch_words(batch)
        h32, sh_off = batch_shingles(wh, offsets, ngram)
        n = np.diff(sh_off)
        doc = np.repeat(np.arange(n.size), n)
        order = np.lexsort((h32, doc))
        h, d = h32[order], doc[order]
        keep = np.ones(h.size, dtype=bool)
        keep[1:] = (h[1:] != h[:-1]) | (d[1:] != d[:-1])
        flat.append(h[keep])
        counts.append(np.bincount(d[keep], minlength=n.size))
    off = np.zeros(len(texts) + 1, dtype=np.int64)
    if counts:
        np.cumsum(np.concatenate(counts), out=off[1:])
    return (np.concatenate(flat) if flat else np.empty(0, np.uint32)), off


def read_texts(pattern: str, limit: int | None) -> list[str]:
    """The `text` column of every parquet file matching `pattern`, in path order (no doc_id needed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"no parquet files match {pattern}; run `yunque run` first (or pass --input)")
    texts = pa.concat_arrays([c for f in files for c in pq.read_table(f, columns=["text"])["text"].chunks])
    return texts.slice(0, limit).to_pylist() if limit else texts.to_pylist()


def _identity(x: int) -> int:
    return x


def signatures_same_shingles(texts: list[str], rounds: int, threads: int) -> None:
    import pyarrow as pa
    from datasketch import MinHash
    from rensa import RMinHash

    from pipelines.data.dedup.minhash import compute_signatures
    from pipelines.data.dedup.minhash import signatures_of_shingles as ours_of_shingles

    cfg = _config(False, 1).dedup
    h32, off = shingle_sets(texts, cfg.ngram)  # before any clock, as are the conversions below
    h64, off64 = h32.astype(np.uint64), off.astype(np.uint64)  # rensa takes unsigned 64-bit values
    lists = [h32[off[i] : off[i + 1]].tolist() for i in range(len(texts))]  # datasketch: Python ints
    column = pa.array(texts, pa.large_string())  # for ours_from_text, built as the stage's read builds it
    print(f"{h32.size:,} distinct shingles ({h32.size / max(len(texts), 1):.0f} per document), num_perm "
          f"{cfg.num_perm}, seed {cfg.seed}; rensa on {threads} rayon thread(s), ours and datasketch on one")
    cases = {
        "ours": lambda: ours_of_shingles(h32, off, cfg.num_perm, cfg.seed, 8192),
        "rensa": lambda: RMinHash.digest_matrix_from_flat_token_hashes(h64, off64, cfg.num_perm, cfg.seed),
        "datasketch": lambda: MinHash.bulk(lists, num_perm=cfg.num_perm, seed=cfg.seed, scheme="affine32",
                                           hashfunc=_identity),
        "ours_from_text": lambda: compute_signatures(column, cfg),
    }
    res = interleaved(cases, rounds)
    ours = res.last["ours"]
    theirs = np.stack([m.hashvalues for m in res.last["datasketch"]]).astype(np.uint32) if texts else ours
    if not np.array_equal(ours, theirs):
        raise SystemExit(f"datasketch's affine32 signatures differ from ours on "
                         f"{int((ours != theirs).any(axis=1).sum())} documents")
    if not np.array_equal(ours, res.last["ours_from_text"]):
        raise SystemExit("signatures from the shingle sets differ from compute_signatures on the texts")
    r = np.asarray(res.last["rensa"].to_rows(), dtype=np.uint32).reshape(len(texts), -1)
    print(f"checked: datasketch == ours bit for bit on all {len(texts):,} documents; rensa gave a "
          f"{r.shape[0]} x {r.shape[1]} matrix (its own permutations: other values)")
    res.report("ours", "docs/s", work=len(texts), compare=[],
               title=f"signatures from the same shingle sets, {rounds} interleaved rounds (seconds per call):")
    print("ours against each peer (signature computation only, same shingles, same num_perm):")
    for peer in ("rensa", "datasketch"):
        res.versus("ours", peer)
    share = Spread.of([a / b for a, b in zip(res.seconds("ours"), res.seconds("ours_from_text"))])
    print(f"  (not a peer comparison) our signature step's share of ours_from_text: {share.fmt('.0%', '')}")


# --- the whole dedup, files to files ------------------------------------------------------


@dataclass
class Corpus:
    """The benchmark's input, written once as a home's filtered_documents shards."""

    home: Path
    shards: list[str]
    ids: list[list[str]]  # doc_ids of each shard, in file order
    chars: int

    @property
    def docs(self) -> int:
        return sum(map(len, self.ids))

    @property
    def input_dir(self) -> Path:
        return self.home / "data" / "filtered_documents"


def prepare_corpus(pattern: str, limit: int | None, home: Path) -> Corpus:
    """Each parquet file matching `pattern` becomes one shard (s0000, s0001, ... in path
    order), cut to `limit` documents in all, with filtered_documents' schema (columns it
    lacks, such as clean_documents' lang, are null; a file without doc_id gets "<shard>-<row>"),
    committed as the stage commits it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.data.documents import FILTERED_SCHEMA
    from stages.store.outputs import DataStore, StageStats

    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"no parquet files match {pattern}; run `yunque run` first (or pass --input)")
    store = DataStore(home)
    shards, ids, chars, left = [], [], 0, limit
    for path in files:
        if left is not None and left <= 0:
            break
        t = pq.read_table(path)
        if left is not None:
            t = t.slice(0, left)
            left -= t.num_rows
        if not t.num_rows:
            continue
        shard = f"s{len(shards):04d}"
        if "doc_id" not in t.column_names:  # a bare text corpus (bench/scale_corpus.py)
            t = t.append_column("doc_id", pa.array([f"{shard}-{i}" for i in range(t.num_rows)]))
        if "source" not in t.column_names:
            t = t.append_column("source", t["doc_id"])
        cols = [t[f.name] if f.name in t.column_names else pa.nulls(t.num_rows, f.type) for f in FILTERED_SCHEMA]
        t = pa.Table.from_arrays(cols, schema=FILTERED_SCHEMA)
        store.commit("filtered_documents", shard, StageStats(key=f"bench-{shard}", docs_in=t.num_rows,
                                                              docs_out=t.num_rows), {"part-0.parquet": t})
        shards.append(shard)
        ids.append(t["doc_id"].to_pylist())
        chars += int(pc.sum(pc.utf8_length(t["text"])).as_py() or 0)
    all_ids = [d for s in ids for d in s]
    if len(set(all_ids)) != len(all_ids):
        raise SystemExit("doc_id is not unique in the input")
    return Corpus(home, shards, ids, chars)


@lru_cache(maxsize=8)
def _config(paragraphs: bool, workers: int, seed: int = 1):
    """The tiny preset's config with these dedup settings (built once per process: not on the clock)."""
    from stages.config import preset

    return preset("tiny", {"dedup.paragraph_dedup": paragraphs, "dedup.workers": workers, "dedup.seed": seed})


def _minhash(home: str, shard: str, paragraphs: bool, workers: int, seed: int) -> None:
    from stages.data.dedup import minhash_stage
    from stages.store.outputs import DataStore

    minhash_stage(DataStore(home), shard, _config(paragraphs, workers, seed))


def _deduped(home: str, shard: str, paragraphs: bool, workers: int, seed: int) -> None:
    from stages.data.dedup import deduped_stage
    from stages.store.outputs import DataStore

    deduped_stage(DataStore(home), shard, _config(paragraphs, workers, seed))


def run_ours(corpus: Corpus, home: Path, paragraphs: bool, workers: int, seed: int = 1) -> dict[str, float]:
    """Our dedup stages on a fresh home holding a copy of the input shards: {stage: seconds}
    and "total". The copy is made before the clock starts."""
    from stages.data.dedup import dedup_index_stage
    from stages.data.quality import quality_stage
    from stages.store.outputs import DataStore

    shutil.copytree(corpus.input_dir, home / "data" / "filtered_documents")
    store, cfg, shards = DataStore(home), _config(paragraphs, workers, seed), corpus.shards
    args = (paragraphs, workers, seed)

    def each(fn) -> None:
        if workers == 1:
            for s in shards:
                fn(str(home), s, *args)  # the config is cached: built above, off the clock
            return
        # spawned, as the product's run workers are fresh processes; the pool's start is on the clock
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(fn, [str(home)] * len(shards), shards, *([a] * len(shards) for a in args)))

    t0 = time.perf_counter()
    each(_minhash)
    t1 = time.perf_counter()
    dedup_index_stage(store, shards, cfg)
    quality_stage(store, shards, cfg)  # deduped_documents reads its decisions too (off: too few documents)
    t2 = time.perf_counter()
    each(_deduped)
    t3 = time.perf_counter()
    return {"minhash": t1 - t0, "index": t2 - t1, "deduped": t3 - t2, "total": t3 - t0}


def _kept_rows(home: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in glob.glob(str(home / "data" / "deduped_documents" / "*" / "*.parquet")))


def full_dedup(corpus: Corpus, args: argparse.Namespace, tmp: Path) -> None:
    from bench.minhash_compare import (
        co_pairs,
        explain,
        fmt,
        groups,
        index_groups_removed,
        jaccard,
        same_groups,
    )
    from bench.minhash_datatrove import datatrove_result, run_datatrove

    stages: dict[str, list[dict[str, float]]] = {"ours": [], "ours_paragraphs": [], "datatrove": []}
    counter = iter(range(1 << 30))

    def ours(paragraphs: bool, name: str):
        def case() -> Clocked:
            home = tmp / f"{name}{next(counter)}"
            t = run_ours(corpus, home, paragraphs, args.workers)
            stages[name].append(t)
            result = (index_groups_removed(home / "data" / "dedup_index"), _kept_rows(home))  # after the clock
            shutil.rmtree(home)
            return Clocked(t["total"], result)
        return case

    def theirs() -> Clocked:
        work = tmp / f"datatrove{next(counter)}"
        t = run_datatrove(str(corpus.input_dir), "*/part-0.parquet", args.dedup_cfg, str(work), args.precision,
                          tasks=len(corpus.shards), workers=args.workers)
        stages["datatrove"].append(t)
        result = datatrove_result(str(work), corpus.ids)  # after the clock
        shutil.rmtree(work)
        return Clocked(t["total"], result)

    cases = {"ours": ours(False, "ours"), "datatrove": theirs, "ours_paragraphs": ours(True, "ours_paragraphs")}
    rounds = interleaved(cases, args.rounds)
    n = corpus.docs
    rounds.report("datatrove", "docs/s", work=n, compare=[], title=(
        f"whole dedup, files to files, {args.rounds} interleaved rounds after one warm-up each, {args.workers} "
        f"process(es) a side ({args.precision}-bit datatrove); seconds per call:"))
    print("ours against datatrove (near-duplicate documents, each with its own reading and writing):")
    rounds.versus("ours", "datatrove")
    rounds.versus("ours_paragraphs", "datatrove", "ours_paragraphs vs datatrove (not like for like: ours "
                  "also dedups paragraphs)")
    print(f"  {corpus.chars / 1e6:.1f} M characters: ours {corpus.chars / statistics.median(rounds.seconds('ours')) / 1e6:.2f}"
          f" M chars/s, datatrove {corpus.chars / statistics.median(rounds.seconds('datatrove')) / 1e6:.2f} M chars/s")
    med = {side: {k: statistics.median(t[k] for t in runs[1:]) for k in runs[0]}  # [1:]: not the warm-up
           for side, runs in stages.items()}
    print(f"median stage seconds: ours {fmt(med['ours'])}; ours_paragraphs {fmt(med['ours_paragraphs'])}; "
          f"datatrove {fmt(med['datatrove'])}")

    (ours_groups, ours_removed), kept = rounds.last["ours"]
    dt_assign, dt_kept, dt_removed = rounds.last["datatrove"]
    if kept != n - len(ours_removed) or len(dt_kept) + len(dt_removed) != n:
        raise SystemExit(f"outputs do not add up: ours kept {kept} + removed {len(ours_removed)}, datatrove kept "
                         f"{len(dt_kept)} + removed {len(dt_removed)}, of {n} documents")
    dt_groups = groups(dt_assign)
    ours_assign = {d for g in ours_groups for d in g}
    # datatrove keeps its union-find root, not the smallest doc_id; removing "all but the
    # min doc_id" of its clusters separates clustering differences from keeper choice.
    dt_removed_min = {d for g in dt_groups for d in g if d != min(g)}
    print(f"clusters (size >= 2), ours / datatrove: {same_groups(ours_groups, dt_groups)}")
    print(f"removed: ours {len(ours_removed)}, datatrove {len(dt_removed)}; with paragraphs ours kept "
          f"{rounds.last['ours_paragraphs'][1]} of {n}")
    print(f"Jaccard of removed sets: {jaccard(ours_removed, dt_removed):.3f} as run,"
          f" {jaccard(ours_removed, dt_removed_min):.3f} with min-doc_id keepers on both")
    in_dt = sum(d in dt_assign for d in ours_removed)
    print(f"ours removed that are in a datatrove cluster: {in_dt}/{len(ours_removed)}; datatrove removed in"
          f" one of ours: {sum(d in ours_assign for d in dt_removed)}/{len(dt_removed)}")
    po, pd = co_pairs(ours_groups), co_pairs(dt_groups)
    print(f"same-cluster pairs: ours {len(po)}, datatrove {len(pd)}, both {len(po & pd)}")
    # Chance baseline: the same method with other random permutations (untimed).
    run_ours(corpus, tmp / "seed2", False, args.workers, seed=2)
    o_groups, o_removed = index_groups_removed(tmp / "seed2" / "data" / "dedup_index")
    print(f"ours seed 1 vs seed 2: {same_groups(ours_groups, o_groups)}, removed-set"
          f" Jaccard {jaccard(ours_removed, o_removed):.3f}")
    doc_ids, texts = load_texts(str(corpus.input_dir / "*" / "part-0.parquet"))
    if args.crosscheck and args.precision == 32:
        from bench.minhash_compare import ours_groups_removed
        from bench.minhash_datatrove import datatrove_signatures
        from pipelines.data.dedup.clusters import lsh_clusters

        # Our LSH + union on datatrove's own signatures must give datatrove's clusters.
        x = lsh_clusters(datatrove_signatures(texts, args.dedup_cfg), doc_ids, args.dedup_cfg)
        print(f"our lsh_clusters on datatrove's sigs: {same_groups(ours_groups_removed(x, doc_ids)[0], dt_groups)}")
    text_of = dict(zip(doc_ids, texts))
    explain(po - pd, text_of, args.dedup_cfg.ngram, "linked by ours only")
    explain(pd - po, text_of, args.dedup_cfg.ngram, "linked by datatrove only")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run_ours(corpus, tmp / "profile", False, args.workers)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=default_glob("filtered_documents"),
                    help="parquet glob of documents (default: the home's filtered_documents)")
    ap.add_argument("--limit", type=int, default=None, help="first N documents of the input")
    ap.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=None,
                    help="interleaved rounds (default 9; 2 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help=f"a check that it runs: --limit {QUICK_LIMIT} and 2 rounds unless given")
    ap.add_argument("--signatures", action="store_true",
                    help="signature computation only, on the same shingles: ours, rensa, datasketch")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="rensa's rayon threads with --signatures (ours and datasketch use one)")
    ap.add_argument("--workers", type=int, default=1, help="processes at a time, each side, for the whole dedup")
    # 32 mirrors ours (32-bit shingle hashes, permutations masked to 32 bits)
    ap.add_argument("--precision", type=int, choices=(32, 64), default=32)
    ap.add_argument("--crosscheck", action="store_true", help="our LSH on datatrove's sigs")
    ap.add_argument("--profile", action="store_true", help="cProfile our dedup stages afterwards")
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else 9
    if args.quick and args.limit is None:
        args.limit = QUICK_LIMIT
    # before rensa's first call, which sizes its thread pool for the process
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    if args.signatures:
        texts = read_texts(args.input, args.limit)
        print(f"{len(texts)} documents, {sum(map(len, texts)) / 1e6:.1f} M characters from {args.input}")
        return signatures_same_shingles(texts, args.rounds, args.threads)


    args.dedup_cfg = _config(False, args.workers).dedup
    with tempfile.TemporaryDirectory(prefix="bench_minhash_") as d:
        tmp = Path(d)
        corpus = prepare_corpus(args.input, args.limit, tmp / "input")
        print(f"{corpus.docs} documents in {len(corpus.shards)} shard(s), {corpus.chars / 1e6:.1f} M characters "
              f"from {args.input}")
        full_dedup(corpus, args, tmp)


if __name__ == "__main__":
    main()
