"""datatrove's four-stage MinHash pipeline, set up to match our DedupConfig, for
bench/bench_minhash.py: its steps, a timed run over documents in memory, and its stage-1
signatures alone (for --crosscheck).

datatrove is run as shipped apart from three shims, each explained where it is made: the
import that skips the package's __init__, a `str.split` word tokenizer, and an xxhash that
encodes its string first.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator

import numpy as np

from pipelines.config import DedupConfig
from pipelines.data.minhash import EMPTY


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
