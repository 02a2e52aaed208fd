"""The scale benchmark's pieces at tiny N: the synthetic corpus with its planted pairs, and
the recall/precision scoring on what the real stages decide."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.scale_corpus import CorpusSpec, generate, jaccard
from bench.scale_score import score
from tests.support.factory import spanish_text


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    """A stand-in for the sample's clean_documents: Spanish prose in a parquet `text` column."""
    d = tmp_path_factory.mktemp("src") / "manuales"
    d.mkdir()
    rng = random.Random(3)
    pq.write_table(pa.table({"text": [spanish_text(rng, paragraphs=4) for _ in range(60)]}), d / "part-0.parquet")
    return str(d.parent / "*" / "part-0.parquet")


def _spec(source: str, n: int = 240) -> CorpusSpec:
    return CorpusSpec(n_docs=n, shards=3, seed=7, dup_fraction=0.1, source_glob=source)


def _text(corpus: Path, src: str) -> str:
    path, row = src.split("#")
    return pq.read_table(corpus / path, columns=["text"])["text"][int(row) - 1].as_py()


def test_corpus_shards_truth_and_determinism(source, tmp_path):
    meta = generate(_spec(source), tmp_path / "a", log=lambda _: None)
    corpus = tmp_path / "a" / "corpus"
    rows = [pq.read_metadata(corpus / s / "part-0.parquet").num_rows for s in meta["shards"]]
    assert sum(rows) == 240 and len(rows) == 3
    truth = pq.read_table(tmp_path / "a" / "truth.parquet").to_pylist()
    assert len(truth) == meta["planted_pairs"] == 240 - meta["base"] > 0
    for t in truth:
        # the saved sources point at the pair, and the saved Jaccard is the pair's exact one
        a, b = _text(corpus, t["source_a"]), _text(corpus, t["source_b"])
        assert jaccard(a, b) == pytest.approx(t["jaccard"])
        assert 0.7 <= t["jaccard"] < 1.0
        assert 500 <= len(a.encode()) <= 4000  # 10-18 sentences (of ~70 characters in this pool)
    # unrelated documents share (almost) no 5-grams
    planted = {t["source_b"] for t in truth} | {t["source_a"] for t in truth}
    others = [f"s00/part-0.parquet#{i}" for i in range(1, rows[0] + 1) if f"s00/part-0.parquet#{i}" not in planted]
    assert max(jaccard(_text(corpus, x), _text(corpus, y)) for x, y in itertools.pairwise(others[:11])) < 0.2
    # same seed, same corpus; a second call leaves it alone
    generate(_spec(source), tmp_path / "b", log=lambda _: None)
    for s in meta["shards"]:
        assert pq.read_table(corpus / s).equals(pq.read_table(tmp_path / "b" / "corpus" / s))
    said: list[str] = []
    generate(_spec(source), tmp_path / "a", log=said.append)
    assert "already" in said[0]


def _run_stages(corpus: Path, home: Path) -> None:
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data import dedup, ingest
    from stages.data.quality import quality_stage
    from stages.store.outputs import DataStore

    cfg, store = preset("tiny"), DataStore(home)
    fs, root = open_corpus(str(corpus))
    shards = list_shards(fs, root)
    for sh in shards:
        ingest.read_stage(store, fs, root, sh, cfg)
        ingest.clean_stage(store, sh.key, cfg)
        ingest.filter_stage(store, sh.key, cfg)
        dedup.minhash_stage(store, sh.key, cfg)
    dedup.dedup_index_stage(store, [s.key for s in shards], cfg)
    quality_stage(store, [s.key for s in shards], cfg)
    for sh in shards:
        dedup.deduped_stage(store, sh.key, cfg)


def test_score_on_the_real_stages(source, tmp_path):
    generate(_spec(source), tmp_path, log=lambda _: None)
    _run_stages(tmp_path / "corpus", tmp_path / "home")
    sc = score(tmp_path / "home", tmp_path / "truth.parquet")
    assert sc["pairs_both_kept"] >= 0.8 * sc["planted_pairs"]
    assert sc["recall"] >= 0.9
    assert sc["precision"] == 1.0 and sc["removed_other"] == 0
    assert sum(b["pairs"] for b in sc["recall_by_jaccard"]) == sc["pairs_both_kept"]
    # Pairs that were never planted are not found: the score can fail.
    truth = pq.read_table(tmp_path / "truth.parquet")
    wrong = truth.set_column(1, "source_b", pa.array(truth["source_b"].to_pylist()[1:] + truth["source_b"].to_pylist()[:1]))
    pq.write_table(wrong, tmp_path / "wrong.parquet")
    bad = score(tmp_path / "home", tmp_path / "wrong.parquet")
    assert bad["recall"] < 0.1
    # ... and the removals, no longer explained by the truth, are checked by exact Jaccard
    # to their keeper: still true near-duplicates.
    assert bad["removed_other"] == bad["other_sampled"] == sc["removed_near_duplicates"] > 0
    assert bad["other_sampled_true_share"] == 1.0 and bad["other_sampled_jaccard_median"] >= 0.7
