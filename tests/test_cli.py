"""The `yunque` console script as a user runs it: a real subprocess, a real instance."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl

from tests.factory import write_two_shards


def yunque(*args: str, env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yunque.cli", *args], check=False, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600, input=stdin)


def test_run_select_and_outputs(tmp_path):
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    home = tmp_path / "home"
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--select", "key:raw_documents")
    assert p.returncode == 0, p.stderr
    assert "[foro] raw_documents 8->6" in p.stdout and "[manuales] raw_documents 10->10" in p.stdout
    assert (home / "dagster" / "dagster.yaml").exists()
    raw = pl.read_parquet(f"{home}/data/raw_documents/*/*.parquet")
    assert set(raw["shard"]) == {"foro", "manuales"}


def test_bad_selection_is_a_clear_error(tmp_path):
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(corpus), "--select", "key:nonexistent")
    assert p.returncode == 2
    assert "matches no asset" in p.stderr


def test_empty_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(tmp_path / "empty"))
    assert p.returncode == 2
    assert "no shards under" in p.stderr


def test_fetch_sample_without_apt_says_what_to_do(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    p = yunque("--home", str(tmp_path / "home"), "fetch-sample", env={"PATH": str(bindir)})
    assert p.returncode == 2
    assert "apt-get" in p.stderr and "--corpus" in p.stderr


def test_vocabulary_too_large_for_the_corpus_is_a_clear_error(tmp_path):
    """The `tiny` preset's 4,096 tokens on a corpus of a few hundred words: the run stops at
    the tokenizer and says what to change, after the data stages succeeded."""
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(corpus), "--workers", "1")
    assert p.returncode == 1
    assert "tokenizer" in p.stderr and "lower tokenizer.vocab_size" in p.stderr, p.stderr
    assert "[foro] deduped_documents" in p.stdout
    assert not (tmp_path / "home" / "data" / "token_shards").exists()
