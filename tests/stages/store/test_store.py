"""Crash consistency of the store, the stale-index guard and the accounting check."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.data.corpus import list_shards, open_corpus
from pipelines.data.documents import Rejection, rejections_table
from stages.config import preset
from stages.data.audit import exactly_once, language_purity
from stages.data.dedup import StaleIndexError, dedup_index_stage, deduped_stage, minhash_stage
from stages.data.ingest import clean_stage, filter_stage, read_stage
from stages.data.quality import StaleQualityError, quality_stage
from stages.store.outputs import DataStore, StageStats
from tests.support.factory import recommit, write_two_shards


def _all_stages(store: DataStore, root, cfg) -> list[str]:
    fs, r = open_corpus(str(root))
    shards = list_shards(fs, r)
    for s in shards:
        read_stage(store, fs, r, s, cfg)
        clean_stage(store, s.key, cfg)
        filter_stage(store, s.key, cfg)
        minhash_stage(store, s.key, cfg)
    keys = [s.key for s in shards]
    dedup_index_stage(store, keys, cfg)
    quality_stage(store, keys, cfg)
    for k in keys:
        deduped_stage(store, k, cfg)
    return keys


def test_stages_account_for_every_document(tmp_path):
    write_two_shards(tmp_path / "corpus")
    store = DataStore(tmp_path / "home")
    for shard in _all_stages(store, tmp_path / "corpus", preset("tiny")):
        acc = exactly_once(store, shard)
        assert acc.ok and acc.read == acc.kept + acc.rejected
    # a document that is both kept and rejected is caught
    kept = pq.read_table(store.part("deduped_documents", "foro"))
    dup = Rejection(kept["doc_id"][0].as_py(), "foro", "x", "dedup", "test", "", None)
    pq.write_table(rejections_table([dup]), store.rejected("foro", "dedup"))
    recommit(store, "deduped_documents", "foro")
    acc = exactly_once(store, "foro")
    assert not acc.ok and acc.duplicated == [kept["doc_id"][0].as_py()]


def test_language_purity_labels_again_only_the_texts_changed_since_language_id(tmp_path):
    """A kept text whose language-ID input is unchanged keeps its label (the filter joined
    lines: layout only); one changed within that input is labelled again, and an English
    one counts against the share and is named."""
    from pipelines.data.langid import model_input

    write_two_shards(tmp_path / "corpus")
    store = DataStore(tmp_path / "home")
    cfg = preset("tiny")
    _all_stages(store, tmp_path / "corpus", cfg)
    lang, m = cfg.langid.language, cfg.langid.max_chars
    clean = pq.read_table(store.part("clean_documents", "foro"))
    texts = dict(zip(clean["doc_id"].to_pylist(), clean["text"].to_pylist()))
    path = store.part("deduped_documents", "foro")
    kept = pq.read_table(path)
    ids = kept["doc_id"].to_pylist()
    assert len(ids) >= 3 and any(texts[d] != t for d, t in zip(ids, kept["text"].to_pylist()))  # layout changed
    before = language_purity(store, "foro", lang, max_chars=m)
    assert (before.checked, before.labelled_other, before.relabelled, before.redetected_target) == (len(ids), 0, 0, 1.0)

    english = "The quick brown fox jumps over the lazy dog while the farmer reads the morning news. " * 4
    tail = texts[ids[1]] + " " + "palabra " * m  # changed only past what language ID reads
    assert model_input(tail, m) == model_input(texts[ids[1]], m)
    cut = texts[ids[2]][len(texts[ids[2]]) // 3:]  # changed within it, still Spanish
    new = {ids[0]: english, ids[1]: tail, ids[2]: cut}
    pq.write_table(kept.set_column(kept.schema.get_field_index("text"), "text",
                                   pa.array([new.get(d, t) for d, t in zip(ids, kept["text"].to_pylist())])), path)
    recommit(store, "deduped_documents", "foro")
    after = language_purity(store, "foro", lang, max_chars=m)
    assert after.relabelled == 2 and after.redetected_target == 0.5
    assert [(d, label) for d, _, _, label, _ in after.off_target] == [(ids[0], "en")]


def test_deduped_refuses_an_index_built_from_older_texts(tmp_path):
    write_two_shards(tmp_path / "corpus")
    store = DataStore(tmp_path / "home")
    _all_stages(store, tmp_path / "corpus", preset("tiny"))
    changed = preset("tiny", {"filters.c4.min_words_per_line": 5})  # C4 rewrites texts
    filter_stage(store, "foro", changed)
    with pytest.raises(StaleIndexError, match="older signatures"):
        deduped_stage(store, "foro", changed)
    minhash_stage(store, "foro", changed)
    dedup_index_stage(store, ["foro", "manuales"], changed)
    with pytest.raises(StaleQualityError, match="current filtered documents"):
        deduped_stage(store, "foro", changed)
    quality_stage(store, ["foro", "manuales"], changed)
    assert deduped_stage(store, "foro", changed).docs_in > 0


def test_side_file_from_an_interrupted_commit_is_a_cache_miss(tmp_path):
    store = DataStore(tmp_path)
    table = pa.table({"x": [1]})
    side = store.rejected("s", "read")
    store.commit("raw_documents", "s", StageStats(key="k1"), {"part-0.parquet": table},
                 side={side: rejections_table([])})
    assert store.cached("raw_documents", "s", "k1") is not None
    # simulate a crash after the side file of a later run (key k2) was written
    pq.write_table(rejections_table([]).replace_schema_metadata({b"yunque_cache_key": b"k2"}), side)
    assert store.cached("raw_documents", "s", "k1") is None
    # nothing half-written is left where the output globs look
    assert [p.name for p in store.dir("raw_documents").iterdir()] == ["s"]


def test_commit_of_a_key_already_committed_keeps_the_first_copy(tmp_path):
    """A second writer that computed the same output finds it committed and discards its
    own copy: the directory readers may hold open is not swapped under them."""
    store = DataStore(tmp_path)
    side = store.rejected("s", "read")
    store.commit("raw_documents", "s", StageStats(key="k1"), {"part-0.parquet": pa.table({"x": [1]})},
                 side={side: rejections_table([])})
    first = store.dir("raw_documents", "s").stat().st_ino
    store.commit("raw_documents", "s", StageStats(key="k1"), {"part-0.parquet": pa.table({"x": [2]})},
                 side={side: rejections_table([])})
    assert store.dir("raw_documents", "s").stat().st_ino == first
    assert pq.read_table(store.part("raw_documents", "s"))["x"].to_pylist() == [1]
    assert list(store.staging().iterdir()) == []
    # an incomplete committed copy (its side file lost) is replaced, not kept
    side.unlink()
    store.commit("raw_documents", "s", StageStats(key="k1"), {"part-0.parquet": pa.table({"x": [3]})},
                 side={side: rejections_table([])})
    assert pq.read_table(store.part("raw_documents", "s"))["x"].to_pylist() == [3]
    assert store.cached("raw_documents", "s", "k1") is not None


def test_a_caller_holding_the_lock_replaces_an_output_it_judged_unusable(tmp_path):
    """Inside `lock()` the caller has checked the cache already: a same-key output that it
    recomputes anyway (e.g. a truncated token array) is replaced, as is a same-key output
    with other stats (a tokenizer retrained on more shards under the same settings)."""
    store = DataStore(tmp_path)
    store.commit("token_shards", "s", StageStats(key="k"), {"a.parquet": pa.table({"x": [1]})})
    with store.lock("token_shards", "s"):
        store.commit("token_shards", "s", StageStats(key="k"), {"a.parquet": pa.table({"x": [2]})})
    assert pq.read_table(store.dir("token_shards", "s") / "a.parquet")["x"].to_pylist() == [2]
    store.commit("tokenizer", None, StageStats(key="t", docs_in=1), {"a.parquet": pa.table({"x": [1]})})
    store.commit("tokenizer", None, StageStats(key="t", docs_in=2), {"a.parquet": pa.table({"x": [2]})})
    assert store.manifest("tokenizer")["stats"]["docs_in"] == 2
    assert list(store.staging().iterdir()) == []
