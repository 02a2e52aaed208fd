"""Decontamination: our n-gram index (pipelines.data.decontamination) beside datatrove's
n-gram decontamination, in interleaved rounds (bench.common.interleaved), and our scan
at corpus scale.

    python -m bench.bench_decontamination [--input GLOB] [--limit N] [--rounds N] [--ngram 13]
    python -m bench.bench_decontamination --scale 1000000 [--words 200]
    python -m bench.bench_decontamination --stage HOME [--preset tiny]

Default: each side's whole job on the same documents and planted items; --scale: our scan
alone on synthetic documents (throughput, peak memory); --stage: the eval_contamination
stage on a home. Method: docs/benchmarks.md#decontamination-bench_decontamination.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # datatrove imports the Hub client; nothing may download

import argparse
import random
import resource
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa

from bench.common import default_glob, interleaved, load_texts
from pipelines.data.decontamination import EvalItem, NgramIndex
from pipelines.tasks import math_tasks

BATCH = 2048
PLANTED = 50


def _items_and_docs(texts: list[str], seed: int) -> tuple[list[EvalItem], list[str], list[int]]:
    rng = random.Random(seed)
    items = [EvalItem(s, p.id, p.question) for s in ("es_add2", "es_add2_rephrased")
             for p in math_tasks.math_eval_set(s, 200, seed=seed)]
    docs = list(texts)
    passages = []
    for i in rng.sample(range(len(docs)), min(200, len(docs))):
        paras = [p for p in docs[i].split("\n\n") if len(p.split()) >= 20]
        if paras:
            p = rng.choice(paras)
            passages.append(p)
            docs[i] = docs[i].replace(p, "")
    items += [EvalItem("passages", f"p{i}", p) for i, p in enumerate(passages)]
    where = rng.sample(range(len(docs)), PLANTED)
    for k, d in enumerate(where):  # one planted item of every kind, in turn
        docs[d] = f"{docs[d]}\n\n{items[(k * 7) % len(items)].text}"
    return items, docs, where


def ours(items: list[EvalItem], docs: list[str], ngram: int) -> set[int]:
    index = NgramIndex(items, ngram)
    found = set()
    for s in range(0, len(docs), BATCH):
        found |= {s + d for d, _, _ in index.scan(pa.array(docs[s:s + BATCH], pa.large_string()))}
    return found


def side_by_side(args: argparse.Namespace) -> None:
    from bench.decont_datatrove import contaminated

    _, texts = load_texts(args.input, args.limit)
    items, docs, where = _items_and_docs(texts, args.seed)
    words = sum(len(d.split()) for d in docs)
    print(f"{len(docs):,} documents ({words:,} words), {len(items)} evaluation items, {PLANTED} planted, "
          f"{args.ngram}-grams")
    work = tempfile.mkdtemp(prefix="bench_decont.")
    try:
        texts_only = [i.text for i in items]
        rounds = interleaved({
            "ours": lambda: ours(items, docs, args.ngram),
            "datatrove": lambda: contaminated(texts_only, docs, args.ngram, work),
        }, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rounds.report("datatrove", unit="words/s", work=words, compare=["ours"],
                  title="documents -> contaminated documents (seconds per round; > 1: ours faster)")
    for name, flagged in rounds.last.items():
        planted = len(flagged & set(where))
        print(f"  {name}: {planted}/{PLANTED} planted documents flagged, {len(flagged - set(where))} others "
              "(a passage's paragraphs found elsewhere in the corpus, or numbers folded)")
    a, b = rounds.last["ours"], rounds.last["datatrove"]
    print(f"  flagged by both {len(a & b)}, by ours only {len(a - b)}, by datatrove only {len(b - a)}")


def _synthetic(rng: np.random.Generator, vocab: np.ndarray, n: int, words: int) -> pa.Array:
    picks = vocab[rng.integers(0, vocab.size, size=(n, words))]
    return pa.array([" ".join(row) for row in picks.tolist()], pa.large_string())


def scale(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzáéíóúñ"))
    vocab = np.array(["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(20_000)])
    items = [EvalItem("synthetic", str(i), " ".join(rng.choice(vocab, rng.integers(6, 40)))) for i in range(600)]
    index = NgramIndex(items, args.ngram)
    scanned, hits, clock = 0, 0, 0.0
    plant_every = max(1, args.scale // PLANTED)
    while scanned < args.scale:
        n = min(BATCH, args.scale - scanned)
        batch = _synthetic(rng, vocab, n, args.words).to_pylist()
        for k in range(n):
            if (scanned + k) % plant_every == 0:
                batch[k] += " " + items[(scanned + k) // plant_every % len(items)].text
        arr = pa.array(batch, pa.large_string())
        t0 = time.perf_counter()
        hits += len({d for d, _, _ in index.scan(arr)})
        clock += time.perf_counter() - t0
        scanned += n
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"scan of {scanned:,} documents x {args.words} words against {len(items)} items "
          f"(index {index.nbytes / 1e6:.2f} MB): {clock:.1f} s, {scanned / clock:,.0f} documents/s, "
          f"{scanned * args.words / clock / 1e6:.2f} M words/s; documents flagged {hits:,} "
          f"(planted {len(range(0, args.scale, plant_every)):,}); peak RSS {rss:,.0f} MB")


def stage(args: argparse.Namespace) -> None:
    from stages.config import preset
    from stages.data.decontamination import ASSET, decontamination_stage
    from stages.data.domain_qa import encoded_shards
    from stages.store.outputs import DataStore

    store = DataStore(args.stage)
    versions = {s: store.manifest("token_shards", s)["key"] for s in encoded_shards(store)}
    shutil.rmtree(store.dir(ASSET), ignore_errors=True)  # measure a computation, not a cache hit
    t0 = time.perf_counter()
    stats = decontamination_stage(store, versions, preset(args.preset))
    wall = time.perf_counter() - t0
    x = stats.extra
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"eval_contamination on {args.stage}: {x['documents_scanned']:,} training documents "
          f"({x['chars_scanned'] / 1e6:.1f} M characters) in {len(versions)} shards, {wall:.1f} s "
          f"(report: {x['seconds']} s); index {x['index_bytes'] / 1e3:.0f} KB; peak RSS {rss:,.0f} MB; "
          f"sets {({k: (v['contaminated'], v['items']) for k, v in x['sets'].items()})}; "
          f"domain QA candidates replaced {len(x['domain_qa_replaced'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=default_glob("deduped_documents"))
    ap.add_argument("--limit", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ngram", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=int, default=0)
    ap.add_argument("--words", type=int, default=200)
    ap.add_argument("--stage", default="")
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    if args.scale:
        scale(args)
    elif args.stage:
        stage(args)
    else:
        side_by_side(args)


if __name__ == "__main__":
    main()
