"""`yunque inspect rejected` on a home built by the real stages: the sample the UI shows,
prefix matching, the unknown-reason error, and a home on S3 read from an empty cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.reports.filters import report as fr
from tests.support.filter_homes import build_home

YUNQUE = str(Path(sys.executable).with_name("yunque"))


def inspect(home: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([YUNQUE, "--home", home, "inspect", "rejected", *args], check=False, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    store, _ = build_home(tmp / "corpus", tmp / "home")
    return store


def test_prints_the_sample_the_ui_shows(home):
    report = fr.shard_report(home, "basura", n=3)
    reason = max(report.drops, key=report.drops.get)
    out = inspect(str(home.home), "--reason", reason, "--shard", "basura", "-n", "3")
    assert out.returncode == 0, out.stderr
    assert f"{reason}: {report.drops[reason]:,} documents rejected in shard basura" in out.stdout
    shown = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("--- ")]
    assert shown == [r["doc_id"][:12] for r in report.samples[reason]]
    for r in report.samples[reason]:
        assert r["text"] in out.stdout  # the same first 300 characters


def test_prefix_matches_every_rule_of_a_filter_across_shards_and_stages(home):
    out = inspect(str(home.home), "--reason", "langid", "-n", "10")
    assert out.returncode == 0, out.stderr
    assert "english.txt" in out.stdout and "langid:other_language" in out.stdout
    short = inspect(str(home.home), "--reason", "gopher", "--chars", "20", "-n", "2")
    assert short.returncode == 0, short.stderr
    texts = [line for line in short.stdout.splitlines()[1:] if not line.startswith(("--- ", "    "))]
    assert len(texts) == 2 and all(len(t) <= 20 for t in texts)
    read = inspect(str(home.home), "--reason", "", "--stage", "read")  # the empty prefix: every read rejection
    assert read.returncode == 0 and "foro" in read.stdout and "filter:" not in read.stdout
    # a record the reader could not read never had a text: said so, not "None chars"
    bad = inspect(str(home.home), "--reason", "malformed_json")
    assert bad.returncode == 0, bad.stderr
    assert "(no text; read stage)" in bad.stdout and "None" not in bad.stdout
    assert "(no text: the reader never made a document of it; the detail says why)" in bad.stdout
    assert "invalid JSON" in bad.stdout


def test_unknown_reason_exits_2_with_the_reasons_and_counts(home):
    out = inspect(str(home.home), "--reason", "no_such_rule")
    assert out.returncode == 2
    assert "no rejection reason 'no_such_rule'" in out.stderr
    assert "langid:other_language" in out.stderr and "empty" not in out.stdout
    lines = [line.split() for line in out.stderr.splitlines()[1:]]
    assert lines and all(parts[-1].replace(",", "").isdigit() for parts in lines)
    empty = inspect(str(home.home / "nowhere"), "--reason", "x")
    assert empty.returncode == 2 and "nothing materialized" in empty.stderr


def test_a_home_on_s3_from_an_empty_cache(s3_server, tmp_path, monkeypatch):
    import s3fs

    monkeypatch.setenv("YUNQUE_S3_ENDPOINT", s3_server)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    if not fs.exists("yunque-inspect"):
        fs.mkdir("yunque-inspect")
    monkeypatch.setenv("YUNQUE_CACHE", str(tmp_path / "machine-a"))
    build_home(tmp_path / "corpus", "s3://yunque-inspect/h")
    out = inspect("s3://yunque-inspect/h", "--reason", "langid", "--shard", "manuales",
                  env={"YUNQUE_CACHE": str(tmp_path / "machine-b")})
    assert out.returncode == 0, out.stderr
    assert "english.txt" in out.stdout
    assert (tmp_path / "machine-b" / "data" / "rejected_documents" / "manuales" / "filter.parquet").exists()


def test_inspect_pii_shows_counts_and_masked_values_never_the_values(tmp_path):
    """A shard with planted values through the real read, clean and filter stages: the
    kept text holds placeholders, `yunque inspect pii` the totals and each value masked in
    its redacted context, and no value anywhere in what it prints or the home stores
    (beside the as-read copies)."""
    import pyarrow.parquet as pq

    from bench.pii_corpus import held_out_texts, plant
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.ingest import clean_stage, filter_stage, read_stage
    from stages.store.outputs import DataStore

    planted = plant(list(held_out_texts("es")[:6]), "es", seed=11)
    shard = tmp_path / "corpus" / "fichas"
    shard.mkdir(parents=True)
    for i, doc in enumerate(planted):
        (shard / f"ficha{i}.txt").write_text(doc.text, encoding="utf-8")
    store, cfg = DataStore(tmp_path / "home"), preset("tiny")
    fs, root = open_corpus(str(tmp_path / "corpus"))
    (info,) = list_shards(fs, root)
    read_stage(store, fs, root, info, cfg)
    clean_stage(store, info.key, cfg)
    stats = filter_stage(store, info.key, cfg)
    values = [v for doc in planted for _, v in doc.values]
    assert sum(stats.extra["pii"].values()) == len(values) and stats.extra["pii_documents"] == len(planted)
    kept = " ".join(pq.read_table(store.part("filtered_documents", info.key))["text"].to_pylist())
    assert not [v for v in values if v in kept] and "<" in kept
    out = subprocess.run([YUNQUE, "--home", str(tmp_path / "home"), "inspect", "pii", "-n", "50"], check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"{len(planted)} documents held personal data" in out.stdout
    assert out.stdout.count("\n  ...") == len(values)  # every value found again, each shown once
    assert not [v for v in values if v in out.stdout]
    only = subprocess.run([YUNQUE, "--home", str(tmp_path / "home"), "inspect", "pii", "--kind", "iban"], check=False,
                          capture_output=True, text=True, timeout=120)
    assert only.returncode == 0 and "<IBAN>" in only.stdout and "<EMAIL>]" not in only.stdout
