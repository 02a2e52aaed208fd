"""A synthetic corpus of N documents with planted near-duplicate pairs, for the scale benchmark.

    python -m bench.scale_corpus --n 1000000 --out /tmp/work/scale/n1000000

Documents mix sentences of the sample's Spanish documents, perturbed, so that they share a
sentence now and then but are never near-duplicates by accident; a known fraction gets a
copy at a measured word-5-gram Jaccard, mostly in another shard. Writes <out>/corpus/
(one folder per shard), <out>/truth.parquet and <out>/corpus_meta.json; deterministic
from the seed. docs/benchmarks.md#read-to-dedup-at-1m-documents-bench_scale.
"""

from __future__ import annotations

import glob
import itertools
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.dedup.minhash import normalize_for_dedup

SOURCE_GLOB = "/tmp/work/mainclone/.yunque/data/clean_documents/*/part-0.parquet"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ROW_GROUP = 8192


@dataclass(frozen=True)
class CorpusSpec:
    n_docs: int
    shards: int
    seed: int = 0
    dup_fraction: float = 0.05  # of the base documents, each gets one planted copy
    jaccard_lo: float = 0.8
    jaccard_hi: float = 0.95
    ngram: int = 5
    source_glob: str = SOURCE_GLOB


def default_shards(n_docs: int) -> int:
    """About 62k documents per shard, between 8 and 16 shards."""
    return int(min(16, max(8, n_docs // 62_500)))


def sentence_pool(source_glob: str, lang: str = "es") -> list[str]:
    """Distinct sentences (40-300 characters, 6+ words) of the source documents in `lang`."""
    from pipelines.data.langid import detect

    files = sorted(glob.glob(source_glob))
    if not files:
        raise SystemExit(f"no source documents match {source_glob}")
    texts: list[str] = []
    for f in files:
        texts += pq.read_table(f, columns=["text"])["text"].to_pylist()
    langs = detect(texts)
    seen: dict[str, None] = {}  # ordered set: the pool's order is deterministic
    for text, (code, score) in zip(texts, langs):
        if code != lang or score < 0.65:
            continue
        for line in text.split("\n"):
            for s in _SENTENCE_END.split(line.strip()):
                s = " ".join(s.split())
                if 40 <= len(s) <= 300 and s.count(" ") >= 5 and s[-1] in ".!?:":
                    seen.setdefault(s)
    return list(seen)


def _perturb(words: list[str], op: int, pos: float, number: int) -> list[str]:
    if op == 0 or len(words) < 4:
        return words
    i = int(pos * (len(words) - 1))
    w = list(words)
    if op == 1:  # swap two adjacent words
        j = min(i + 1, len(w) - 1)
        w[i], w[j] = w[j], w[i]
    elif op == 2:  # drop a word (never the last, which carries the full stop)
        del w[min(i, len(w) - 2)]
    else:  # a number, as in "versión 3", "página 17"
        w.insert(i, str(number))
    return w


def base_documents(pool_words: list[list[str]], n: int, rng: np.random.Generator) -> list[str]:
    """`n` documents of 10-18 perturbed sentences in 2-4 paragraphs (about 1-2 KB each).

    All random draws are made up front, per corpus, as arrays; the Python loop only slices
    them and joins strings."""
    n_sent = rng.integers(10, 19, n)
    n_par = rng.integers(2, 5, n)
    total = int(n_sent.sum())
    pick = rng.integers(0, len(pool_words), total)
    ops = rng.choice(4, size=total, p=[0.4, 0.25, 0.2, 0.15])
    pos = rng.random(total)
    nums = rng.integers(1, 2000, total)
    docs: list[str] = []
    k = 0
    for d in range(n):
        m = int(n_sent[d])
        sents = [" ".join(_perturb(pool_words[pick[k + j]], ops[k + j], pos[k + j], nums[k + j])) for j in range(m)]
        k += m
        cuts = np.linspace(0, m, int(n_par[d]) + 1).astype(int)
        docs.append("\n\n".join(" ".join(sents[a:b]) for a, b in itertools.pairwise(cuts)))
    return docs


def shingles(text: str, ngram: int = 5) -> set[tuple[str, ...]]:
    """Word n-grams after the pipeline's dedup normalisation (the sets MinHash estimates)."""
    w = normalize_for_dedup(text)
    if len(w) < ngram:
        return {tuple(w)} if w else set()
    return set(zip(*(w[i:] for i in range(ngram))))


def jaccard(a: str, b: str, ngram: int = 5) -> float:
    sa, sb = shingles(a, ngram), shingles(b, ngram)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 1.0


def near_copy(text: str, target: float, vocab: list[str], rng: np.random.Generator, ngram: int = 5) -> str:
    """`text` with k words replaced by vocabulary words; one substitution changes up to
    `ngram` shingles on each side, so J ~ (S - n k) / (S + n k) gives k for a target J."""
    tokens = text.split(" ")  # keeps the paragraph breaks inside tokens
    s = max(len(tokens) - ngram + 1, 1)
    k = max(1, round(s * (1 - target) / (ngram * (1 + target))))
    free = [i for i, t in enumerate(tokens) if "\n" not in t]  # a token with a paragraph break stays
    for i in rng.choice(free, size=min(k, len(free)), replace=False):
        tokens[i] = vocab[int(rng.integers(len(vocab)))]
    return " ".join(tokens)


def generate(spec: CorpusSpec, out: Path, log=print) -> dict:
    """Write the corpus and its ground truth under `out` (skipped when already there)."""
    meta_path = out / "corpus_meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("spec") == asdict(spec):
            log(f"corpus of {spec.n_docs:,} documents already at {out}")
            return meta
    t0 = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    pool = sentence_pool(spec.source_glob)
    pool_words = [s.split(" ") for s in pool]
    vocab = sorted({w for s in pool_words for w in s if w.isalpha() and len(w) > 3})
    n_base = round(spec.n_docs / (1 + spec.dup_fraction))
    n_copy = spec.n_docs - n_base
    log(f"pool: {len(pool):,} sentences, {len(vocab):,} words; {n_base:,} documents + {n_copy:,} planted copies")
    docs = base_documents(pool_words, n_base, rng)
    originals = rng.choice(n_base, size=n_copy, replace=False)
    targets = rng.uniform(spec.jaccard_lo, spec.jaccard_hi, n_copy)
    docs += [near_copy(docs[o], t, vocab, rng, spec.ngram) for o, t in zip(originals, targets)]
    t_text = time.perf_counter() - t0
    # Document i goes to slot[i]; shards hold consecutive slots.
    slot = rng.permutation(spec.n_docs)
    per = -(-spec.n_docs // spec.shards)
    names = [f"s{i:02d}" for i in range(spec.shards)]
    corpus = out / "corpus"
    by_slot = np.argsort(slot)
    total_bytes = 0
    for si, name in enumerate(names):
        rows = by_slot[si * per : (si + 1) * per]
        texts = [docs[i] for i in rows]
        (corpus / name).mkdir(parents=True, exist_ok=True)
        arr = pa.array(texts, pa.string())
        total_bytes += int(pc.sum(pc.binary_length(arr)).as_py() or 0)
        pq.write_table(pa.table({"text": arr}), corpus / name / "part-0.parquet", row_group_size=_ROW_GROUP)
    def source(i: int) -> str:
        s = int(slot[i])
        return f"{names[s // per]}/part-0.parquet#{s % per + 1}"

    exact = [jaccard(docs[o], docs[n_base + j], spec.ngram) for j, o in enumerate(originals)]
    truth = pa.table({
        "source_a": [source(int(o)) for o in originals],
        "source_b": [source(n_base + j) for j in range(n_copy)],
        "target": pa.array(targets, pa.float64()),
        "jaccard": pa.array(exact, pa.float64()),
    })
    pq.write_table(truth, out / "truth.parquet")
    meta = {"spec": asdict(spec), "documents": spec.n_docs, "base": n_base, "planted_pairs": n_copy,
            "pool_sentences": len(pool), "text_bytes": int(total_bytes), "shards": names,
            "jaccard_exact": {"min": float(np.min(exact)) if exact else None,
                              "median": float(np.median(exact)) if exact else None,
                              "max": float(np.max(exact)) if exact else None},
            "seconds_text": round(t_text, 1), "seconds": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    log(f"wrote {spec.n_docs:,} documents, {total_bytes / 1e6:,.0f} MB of text, in {meta['seconds']} s")
    return meta


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Write the scale benchmark's synthetic corpus.")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--shards", type=int, default=0, help="default: about 62k documents a shard, 8 to 16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="writes <out>/corpus, <out>/truth.parquet, <out>/corpus_meta.json")
    a = ap.parse_args()
    spec = CorpusSpec(n_docs=a.n, shards=a.shards or default_shards(a.n), seed=a.seed)
    generate(spec, Path(a.out), log=lambda m: print(time.strftime("%H:%M:%S"), " ", m, flush=True))


if __name__ == "__main__":
    main()
