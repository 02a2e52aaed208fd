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
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import importlib
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from itertools import combinations

import numpy as np

from bench.common import Clocked, default_glob, interleaved, load_texts
from pipelines.config import DedupConfig
from pipelines.data.dedup import Clusters, lsh_clusters
from pipelines.data.minhash import EMPTY, compute_signatures, normalize_for_dedup


def import_datatrove_minhash() -> types.ModuleType:
    """datatrove.pipeline.dedup.minhash without the package's __init__, which imports the
    exact-substring steps and so HF `tokenizers` (not installed; MinHash never uses it)."""
    try:
        return importlib.import_module("datatrove.pipeline.dedup.minhash")
    except ModuleNotFoundError as err:
        if err.name != "tokenizers":
            raise
    import datatrove.pipeline as dp

    for name in [m for m in sys.modules if m.startswith("datatrove.pipeline.dedup")]:
        del sys.modules[name]  # the half-imported package from the failed attempt
    pkg = types.ModuleType("datatrove.pipeline.dedup")
    pkg.__path__ = [os.path.join(os.path.dirname(dp.__file__), "dedup")]
    sys.modules[pkg.__name__] = pkg
    return importlib.import_module("datatrove.pipeline.dedup.minhash")


def split_tokenizer() -> object:
    """A datatrove WordTokenizer that is `str.split`. Its own ones for "en"/"es" (and the
    fallback) are NLTK/spaCy models that need downloads; and `simplify_text` has already
    replaced punctuation by spaces, so whitespace splitting is what a word tokenizer would
    do on that text anyway, and what ours does after `normalize_for_dedup`."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SplitTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    return SplitTokenizer()


def xxhash_of_str(precision: int) -> Callable[[str], int]:
    """datatrove's own xxhash32/xxhash64 pass the n-gram `str` straight to xxhash, which
    xxhash 4 rejects ("Strings must be encoded before hashing"); same hash, encoded."""
    import xxhash

    fn = xxhash.xxh32_intdigest if precision == 32 else xxhash.xxh64_intdigest
    return lambda s: fn(s.encode("utf-8"))


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


def datatrove_steps(cfg: DedupConfig, precision: int, sig_dir: str) -> tuple[object, object]:
    """(MinhashConfig, MinhashDedupSignature) matching our DedupConfig."""
    from datatrove.utils.hashing import HashConfig

    mh = import_datatrove_minhash()
    config = mh.MinhashConfig(n_grams=cfg.ngram, num_buckets=cfg.bands, hashes_per_bucket=cfg.rows, seed=cfg.seed,
                              hash_config=HashConfig(precision=precision, hash_fc="xxhash"))
    step = mh.MinhashDedupSignature(sig_dir, config, language=split_tokenizer())
    step._hash_func = xxhash_of_str(precision)
    return config, step


def run_datatrove(
    doc_ids: list[str], texts: list[str], cfg: DedupConfig, workdir: str, precision: int
) -> tuple[dict, dict[str, int], set[str]]:
    """({stage: seconds}, {doc_id: cluster id} for clustered docs, kept doc_ids)."""
    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor

    mh = import_datatrove_minhash()
    sigs, bkts, clus = (os.path.join(workdir, d) for d in ("sigs", "buckets", "clusters"))
    config, signature = datatrove_steps(cfg, precision, sigs)
    docs = [Document(text=t, id=d) for d, t in zip(doc_ids, texts)]

    # A plain function, not a PipelineStep: with workers=1 the executor deep-copies the
    # pipeline per task, and deepcopy leaves functions (and so this list) alone.
    def source(_data: object, _rank: int = 0, _world_size: int = 1) -> Iterator[Document]:
        yield from docs

    kept: set[str] = set()

    def collect(data: Iterator[Document], _rank: int = 0, _ws: int = 1) -> Iterator[Document]:
        for doc in data:
            kept.add(doc.id)
            yield doc

    stages: list[tuple[str, list[Callable | object], int]] = [
        ("signatures", [source, signature], 1),
        # stage 2 insists on a multiple of num_buckets tasks (one per bucket); workers=1
        # runs those 14 tasks one after another in this process.
        ("buckets", [mh.MinhashDedupBuckets(sigs, bkts, config=config)], cfg.bands),
        ("cluster", [mh.MinhashDedupCluster(bkts, clus, config, save_cluster_id=True)], 1),
        ("filter", [source, mh.MinhashDedupFilter(clus), collect], 1),
    ]
    times: dict[str, float] = {}
    for name, pipeline, tasks in stages:
        ex = LocalPipelineExecutor(pipeline, tasks=tasks, workers=1, logging_dir=os.path.join(workdir, "logs", name))
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):  # its INFO logs and tqdm bars
            ex.run()
        times[name] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    # `collect` only sees the kept documents; stage 3's .clusters file has every clustered
    # one as (position in the input, cluster id) uint32 pairs.
    path = os.path.join(clus, "000000.clusters")
    pairs = np.fromfile(path, dtype="<u4").reshape(-1, 2) if os.path.exists(path) else []
    return times, {doc_ids[int(i)]: int(c) for i, c in pairs}, kept


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


def datatrove_signatures(texts: list[str], cfg: DedupConfig) -> np.ndarray:
    """datatrove's stage-1 signatures (32-bit), in our (n, num_perm) layout, EMPTY where
    it writes none (fewer than n_grams words)."""
    _, step = datatrove_steps(cfg, 32, tempfile.gettempdir())  # nothing is written
    out = np.full((len(texts), cfg.num_perm), EMPTY, dtype=np.uint32)
    for i, t in enumerate(texts):
        sh = step.get_shingles(t)
        if sh.size:
            out[i] = np.concatenate(step.get_signature(sh))
    return out


def same_groups(a: list[frozenset[str]], b: list[frozenset[str]]) -> str:
    sa, sb = set(a), set(b)
    return f"{len(sa)} / {len(sb)}, {len(sa & sb)} with identical members"


def ours_groups_removed(cl: Clusters, doc_ids: list[str]) -> tuple[list[frozenset[str]], set]:
    assign = {doc_ids[i]: int(c) for i, c in enumerate(cl.labels) if c >= 0}
    return groups(assign), {doc_ids[i] for i in cl.to_remove}


def fmt(t: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}s" for k, v in t.items())


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
