"""datatrove's four-stage MinHash pipeline, set up to match our DedupConfig, for
bench/bench_minhash.py: its steps, a timed run from parquet files to parquet files (its
own reader and writers), what that run decided (read back from its files), and its
stage-1 signatures alone (for --crosscheck).

datatrove is run as shipped apart from three shims, each explained where it is made: the
import that skips the package's __init__, a `str.split` word tokenizer, and an xxhash that
encodes its string first.
"""

from __future__ import annotations

import contextlib
import glob
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
from pipelines.data.dedup.minhash import EMPTY


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


def run_datatrove(input_dir: str, glob_pattern: str, cfg: DedupConfig, workdir: str, precision: int,
                  tasks: int, workers: int = 1) -> dict[str, float]:
    """datatrove's MinHash dedup as its own example pipeline runs it, from files to files:
    read the parquet files under `input_dir` (ParquetReader, `doc_id` as the id, the other
    columns as metadata), signatures, buckets, clusters, then read the input again and write
    the kept documents (ParquetWriter, `workdir/output`) and the removed ones (the filter's
    exclusion writer, `workdir/removed`). `tasks` tasks for the per-file stages (one per
    input file: task r reads files r, r + tasks, ...), `workers` processes at a time.
    Returns {stage: seconds of its executor's run()} and "total"; everything datatrove does
    inside run() (its files, sorting, logs, stats, the executor's manager process, a worker
    pool when workers > 1) is on the clock."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter

    mh = import_datatrove_minhash()
    sigs, bkts, clus = (os.path.join(workdir, d) for d in ("sigs", "buckets", "clusters"))
    config, signature = datatrove_steps(cfg, precision, sigs)

    def reader() -> object:
        return ParquetReader(input_dir, glob_pattern=glob_pattern, text_key="text", id_key="doc_id")

    stages: list[tuple[str, list[object], int]] = [
        ("signatures", [reader(), signature], tasks),
        # stage 2 insists on a multiple of num_buckets tasks (one per bucket)
        ("buckets", [mh.MinhashDedupBuckets(sigs, bkts, config=config)], cfg.bands),
        ("cluster", [mh.MinhashDedupCluster(bkts, clus, config, save_cluster_id=True)], 1),
        ("filter", [reader(),
                    mh.MinhashDedupFilter(clus, exclusion_writer=ParquetWriter(os.path.join(workdir, "removed"))),
                    ParquetWriter(os.path.join(workdir, "output"))], tasks),
    ]
    times: dict[str, float] = {}
    for name, pipeline, n_tasks in stages:
        ex = LocalPipelineExecutor(pipeline, tasks=n_tasks, workers=min(workers, n_tasks),
                                   logging_dir=os.path.join(workdir, "logs", name))
        t0 = time.perf_counter()
        with quiet_stderr():  # its INFO logs and tqdm bars, its worker processes' too
            ex.run()
        times[name] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    return times


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """stderr to /dev/null at the file-descriptor level, so that child processes (which
    write to the inherited fd 2, not to this process's sys.stderr) are quiet too."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def datatrove_result(workdir: str, ids_by_task: list[list[str]]) -> tuple[dict[str, int], set[str], set[str]]:
    """({doc_id: cluster id} of the clustered documents, kept doc_ids, removed doc_ids) of
    a finished run_datatrove, read from its files (after its clock). `ids_by_task[r]` are
    the doc_ids task r read, in order: stage 3's `<rank>.clusters` files hold (position in
    the task's input, cluster id) uint32 pairs."""
    import pyarrow.parquet as pq

    def ids(folder: str) -> set[str]:
        files = glob.glob(os.path.join(workdir, folder, "*.parquet"))
        return {i for f in files for i in pq.read_table(f, columns=["id"])["id"].to_pylist()}

    assign: dict[str, int] = {}
    for rank, task_ids in enumerate(ids_by_task):
        path = os.path.join(workdir, "clusters", f"{rank:06d}.clusters")
        if os.path.exists(path):
            for i, c in np.fromfile(path, dtype="<u4").reshape(-1, 2):
                assign[task_ids[int(i)]] = int(c)
    return assign, ids("output"), ids("removed")


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
