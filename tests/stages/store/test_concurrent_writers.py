"""Two or more writers of one partition at the same moment (the automation sensor's run
racing a backfill of the same shard, two `yunque run` on one home), in real processes:
no writer fails, one consistent output, nothing left in staging, the work done once."""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import traceback
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.store.outputs import DataStore, StageStats
from tests.support.factory import write_two_shards

WRITERS = 4
ROUNDS = 3
COMMITS = 60  # per writer, in the commit stress test


def _stage_writer(home: str, corpus: str, rounds: int, barrier, out) -> None:
    """One writer process: per round, read_stage and clean_stage of shard `foro` under a
    fresh home, started together with the other writers by the barrier."""
    try:
        from pipelines.data.corpus import list_shards, open_corpus
        from stages.config import preset
        from stages.data.ingest import clean_stage, read_stage

        cfg = preset("tiny")
        fs, root = open_corpus(corpus)
        shard = next(s for s in list_shards(fs, root) if s.key == "foro")
        for r in range(rounds):
            store = DataStore(Path(home) / f"round{r}")
            barrier.wait(timeout=120)
            raw = read_stage(store, fs, root, shard, cfg)
            clean = clean_stage(store, shard.key, cfg)
            out.put(("ok", r, raw.key, raw.cached, raw.docs_out, clean.key, clean.cached, clean.docs_out))
    except BaseException:  # noqa: BLE001 - any failure of a writer is the finding, sent to the test
        out.put(("error", traceback.format_exc()))


def _commit_writer(home: str, n: int, barrier, out) -> None:
    """One writer process: `n` commits started together with the other writers. Commit i
    goes to output `s<i // 2>`: the first of each pair finds no directory (two writers
    both rename onto the same new name), the second replaces one (two writers both rename
    the same directory away). The side file says which key it was written for."""
    store = DataStore(home)
    table = pa.table({"x": list(range(100))})
    errors = []
    for i in range(n):
        shard = f"s{i // 2}"
        barrier.wait(timeout=120)
        try:
            store.commit("raw_documents", shard, StageStats(key=f"k{i}", docs_out=100), {"part-0.parquet": table},
                         side={store.rejected(shard, "read"): pa.table({"doc_id": [f"k{i}"]})})
        except Exception:  # noqa: BLE001 - counted and reported by the test (old code: ENOTEMPTY)
            errors.append(traceback.format_exc())
    out.put(("error", errors[0], len(errors)) if errors else ("ok",))


def _run(target, args: tuple, writers: int = WRITERS, timeout: float = 600) -> list[tuple]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(writers)]
    for p in procs:
        p.start()
    results, deadline = [], time.monotonic() + timeout
    try:
        while any(p.is_alive() for p in procs) or not out.empty():
            try:
                results.append(out.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError("writers did not finish") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return results


def test_concurrent_commits_of_one_partition_never_fail(tmp_path):
    """Reproduces ENOTEMPTY: before commits took a lock, two writers that both found no
    output directory both renamed their staging directory onto it, and the second rename
    failed with `OSError: [Errno 39] Directory not empty`; two that both found one both
    renamed it away, and the second failed with FileNotFoundError. Four processes commit
    the same outputs at the same moments; every commit succeeds and every output is
    complete, with the side file of the key that was committed."""
    results = _run(_commit_writer, (str(tmp_path), COMMITS))
    errors = [r for r in results if r[0] == "error"]
    assert not errors, f"{sum(r[2] for r in errors)} commits failed, the first with:\n{errors[0][1]}"
    assert len(results) == WRITERS
    store = DataStore(tmp_path)
    for j in range(COMMITS // 2):
        m = store.manifest("raw_documents", f"s{j}")
        assert m is not None and m["key"] in (f"k{2 * j}", f"k{2 * j + 1}")
        assert store.cached("raw_documents", f"s{j}", m["key"]) is not None
        assert pq.read_table(store.part("raw_documents", f"s{j}")).num_rows == 100
        assert pq.read_table(store.rejected(f"s{j}", "read"))["doc_id"].to_pylist() == [m["key"]]
    assert list(store.staging().iterdir()) == []
    assert len(list(store.dir("raw_documents").iterdir())) == COMMITS // 2


def test_concurrent_stage_runs_compute_once(tmp_path):
    """read_stage + clean_stage of one shard in four processes at once, several rounds:
    no writer fails, every writer returns the same key and row counts as a single writer,
    exactly one of them computed each stage (the others waited and hit the cache), and the
    output is readable with nothing left in staging."""
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    results = _run(_stage_writer, (str(tmp_path / "homes"), str(corpus), ROUNDS))
    errors = [r[1] for r in results if r[0] == "error"]
    assert not errors, errors[0]
    assert len(results) == WRITERS * ROUNDS

    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.ingest import clean_stage, read_stage

    single = DataStore(tmp_path / "single")
    fs, root = open_corpus(str(corpus))
    shard = next(s for s in list_shards(fs, root) if s.key == "foro")
    raw, clean = read_stage(single, fs, root, shard, preset("tiny")), clean_stage(single, "foro", preset("tiny"))
    for r in range(ROUNDS):
        rows = [x for x in results if x[1] == r]
        assert {(x[2], x[4], x[5], x[7]) for x in rows} == {(raw.key, raw.docs_out, clean.key, clean.docs_out)}
        assert sum(not x[3] for x in rows) == 1, "raw_documents computed more than once"
        assert sum(not x[6] for x in rows) == 1, "clean_documents computed more than once"
        store = DataStore(tmp_path / "homes" / f"round{r}")
        assert store.manifest("clean_documents", "foro")["key"] == clean.key
        assert pq.read_table(store.part("clean_documents", "foro")).num_rows == clean.docs_out
        assert pq.read_table(store.part("raw_documents", "foro")).num_rows == raw.docs_out
        assert pq.read_table(store.rejected("foro", "read")).num_rows == raw.rejected
        assert list(store.staging().iterdir()) == []


def test_lock_is_reentrant_in_a_thread_and_exclusive_across_threads(tmp_path):
    store = DataStore(tmp_path)
    table = pa.table({"x": [1]})
    with store.lock("raw_documents", "s"), store.lock("raw_documents", "s"):
        # commit takes the same lock inside: it must not wait on its own caller
        store.commit("raw_documents", "s", StageStats(key="k"), {"part-0.parquet": table})
        entered = threading.Event()

        def other() -> None:
            with store.lock("raw_documents", "s"):
                entered.set()

        t = threading.Thread(target=other)
        t.start()
        assert not entered.wait(0.5), "another thread got the lock while this one holds it"
    assert entered.wait(10), "the lock was not released"
    t.join()
    with store.lock("raw_documents", "t"):  # another shard is another lock
        pass
    assert store.cached("raw_documents", "s", "k") is not None


@pytest.mark.parametrize("failing", ["write", "side"])
def test_a_failed_commit_leaves_nothing_in_staging(tmp_path, failing):
    store = DataStore(tmp_path)

    def boom(directory: Path) -> list[str]:
        raise RuntimeError("disk full")

    if failing == "write":
        with pytest.raises(RuntimeError):
            store.commit("token_shards", "s", StageStats(key="k"), {}, write=boom)
    else:
        blocker = store.dir("rejected_documents", "s")  # a file where the side file's folder goes
        blocker.parent.mkdir(parents=True)
        blocker.write_text("")
        with pytest.raises(OSError):
            store.commit("token_shards", "s", StageStats(key="k"), {"part-0.parquet": pa.table({"x": [1]})},
                         side={store.rejected("s", "read"): pa.table({"doc_id": ["a"]})})
    assert list(store.staging().iterdir()) == []
    assert not store.dir("token_shards", "s").exists()
