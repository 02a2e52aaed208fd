"""The side-by-side benchmarks against peers (bench_train, bench_minhash, bench_tokenizer)
at toy sizes: each runs end to end, checks that the sides computed the same thing, and
prints its headline ratio; the GPU path of bench_train parses and skips without a GPU.
The timings themselves mean nothing here. Skipped where the `bench` extra is missing."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.factory import spanish_text


def _corpus(root: Path, files: int, docs: int, copies: int = 0, seed: int = 3) -> str:
    """`files` parquet files of `docs` Spanish documents each (doc_id, text); the first
    `copies` documents of the first file appear again, verbatim, in the last one."""
    rng = random.Random(seed)
    texts = [[spanish_text(rng, paragraphs=3) for _ in range(docs)] for _ in range(files)]
    texts[-1] += texts[0][:copies]
    for f, ts in enumerate(texts):
        (root / f"f{f}").mkdir(parents=True)
        pq.write_table(pa.table({"doc_id": [f"f{f}-{i}" for i in range(len(ts))], "text": ts}),
                       root / f"f{f}" / "part-0.parquet")
    return str(root / "*" / "part-0.parquet")


def test_bench_train_gpu_path_skips_without_a_gpu(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the path would run, not skip")
    from bench import bench_train

    assert bench_train.main(["--device", "cuda", "--quick"]) == 0
    assert "skipped" in capsys.readouterr().out


def test_bench_train_sets_ours_against_the_fastest_transformers_configuration(capsys):
    pytest.importorskip("transformers")
    from bench import bench_train

    assert bench_train.main(["--presets", "tiny", "--dtypes", "fp32", "--batch", "1", "--seq", "16", "--rounds",
                             "2", "--cases", "yunque,hf_eager,hf_sdpa", "--peak-reps", "1"]) == 0
    out = capsys.readouterr().out
    headline = next(line for line in out.splitlines() if "HEADLINE yunque vs hf_" in line)
    assert "fastest transformers" in headline and "median" in headline
    assert "vs hf_eager" in out and "vs hf_sdpa" in out and "MFU hf_sdpa" in out


def test_bench_train_mfu_against_a_datasheet_peak():
    """The GPU path's MFU (datasheet peak, no peak case in the rounds), on made-up rounds."""
    from bench.bench_train import mfu
    from bench.common import Rounds

    rounds = Rounds(times=[{"a": 1.0, "b": 2.0}, {"a": 0.5, "b": 2.0}], orders=[["a", "b"], ["b", "a"]])
    out = mfu(rounds, ["a", "b"], model_flops=1e12, datasheet=4e12)
    assert out["mfu a"].lo == pytest.approx(0.25) and out["mfu a"].hi == pytest.approx(0.5)
    assert out["mfu b"].median == pytest.approx(0.125) and "peak GFLOP/s" not in out


def test_bench_minhash_signatures_on_the_same_shingles(tmp_path, capsys, monkeypatch):
    pytest.importorskip("rensa")
    pytest.importorskip("datasketch")
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")  # main sets it; restored afterwards
    from bench import bench_minhash

    bench_minhash.main(["--signatures", "--input", _corpus(tmp_path, 1, 40), "--rounds", "1", "--threads", "1"])
    out = capsys.readouterr().out
    assert "datasketch == ours bit for bit on all 40 documents" in out
    assert "ours vs rensa:" in out and "ours vs datasketch:" in out


def test_bench_minhash_shingle_sets_are_each_documents_distinct_shingles():
    import numpy as np

    from bench.bench_minhash import shingle_sets
    from pipelines.data.dedup.minhash import normalize_for_dedup, shingle_hashes

    texts = ["uno dos tres cuatro cinco seis uno dos tres cuatro cinco", "", "corto", "Hola, mundo: ¡hola!"]
    h, off = shingle_sets(texts, 5)
    assert off[0] == 0 and off[-1] == h.size and len(off) == len(texts) + 1
    for i, t in enumerate(texts):
        assert np.array_equal(h[off[i] : off[i + 1]], shingle_hashes(normalize_for_dedup(t), 5).astype(np.uint32))


def test_bench_minhash_whole_dedup_files_to_files(tmp_path, capsys, monkeypatch):
    pytest.importorskip("datatrove")
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")
    from bench import bench_minhash

    bench_minhash.main(["--input", _corpus(tmp_path, 2, 30, copies=3), "--rounds", "1"])
    out = capsys.readouterr().out
    assert "ours vs datatrove:" in out and "ours_paragraphs vs datatrove" in out
    assert "removed: ours 3, datatrove 3" in out
    assert "clusters (size >= 2), ours / datatrove: 3 / 3, 3 with identical members" in out


def test_bench_tokenizer_names_each_side_and_checks_the_ids(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")
    from bench import bench_tokenizer

    bench_tokenizer.main(["--input", _corpus(tmp_path, 1, 60), "--vocab", "300", "--rounds", "1", "--threads", "2"])
    out = capsys.readouterr().out
    assert "identical ids on all 60 documents" in out
    for line in ("ours_encode vs tiktoken_encode_batch:", "ours_encode vs hf_encode_batch_fast:",
                 "ours_encode_write vs tiktoken_encode_batch (not like for like"):
        assert line in out
