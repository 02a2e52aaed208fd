"""The learned quality signal through the real stages (read, clean, filter, signatures,
dedup_index, quality_model, deduped_documents) on real documentation pages (the held-out
GIMP manual, Spanish). The model is trained on the pages; then a shard of word salad made
from those very pages lands, and is scored by the same model. The integrity rules are off,
so no rule catches the salad (that is what they would otherwise do): the learned signal
must, and cost the good pages little.

A corpus that holds more junk than `filters.learned.max_good_loss` when the model is
trained teaches it that the junk is good text (the threshold is calibrated on rule-passing
pages): docs/learned-quality.md says so."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.data.extract import html_to_text
from pipelines.data.quality import RULE, corrupt
from tests.support.docs_eval_pages import good_pages

SALAD = 15


def _corpus(root: Path) -> list[str]:
    """Three shards of real pages, and a fourth of word salad made from the first pages."""
    pages = good_pages("es")
    for i, (source, html) in enumerate(pages):
        path = root / f"manual{i % 3}" / source.replace("/", "_")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    rng = random.Random(7)
    salads = []
    for i, (_, html) in enumerate(pages[:SALAD]):
        # each line keeps its length and the page its words, in random order (the page's
        # punctuation with them): what a spinner or a broken extractor makes
        salad = corrupt(html_to_text(html), "shuffled_words", rng)
        salads.append(salad)
        (root / "revuelto").mkdir(exist_ok=True)
        (root / "revuelto" / f"pagina{i}.txt").write_text(salad, encoding="utf-8")
    return salads


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory):
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.dedup import dedup_index_stage, deduped_stage, minhash_stage
    from stages.data.ingest import clean_stage, filter_stage, read_stage
    from stages.data.quality import quality_stage
    from stages.store.outputs import DataStore

    tmp = tmp_path_factory.mktemp("learned")
    _corpus(tmp / "corpus")
    cfg = preset("tiny", {"language": "es", "filters.integrity.enabled": False,
                          "filters.learned.min_documents": 50})
    store = DataStore(tmp / "home")
    fs, root = open_corpus(str(tmp / "corpus"))
    shards = [s.key for s in list_shards(fs, root)]
    infos = {s.key: s for s in list_shards(fs, root)}

    def through(keys: list[str]):
        for key in keys:
            read_stage(store, fs, root, infos[key], cfg)
            clean_stage(store, key, cfg)
            filter_stage(store, key, cfg)
            minhash_stage(store, key, cfg)
        done = [k for k in shards if (store.dir("minhash_signatures", k)).exists()]
        dedup_index_stage(store, done, cfg)
        stats = quality_stage(store, done, cfg)
        for key in done:
            deduped_stage(store, key, cfg)
        return stats

    first = through([s for s in shards if s != "revuelto"])  # the manual: the model is trained
    assert first.extra["retrained"]
    stats = through(["revuelto"])  # the salad lands
    return store, shards, stats, cfg


def _dropped(store, shard: str) -> int:
    table = pq.read_table(store.rejected(shard, "dedup"), columns=["reason"])
    return table["reason"].to_pylist().count(RULE)


def test_the_rules_pass_the_salad_and_the_learned_signal_drops_it(scored) -> None:
    store, _, stats, _ = scored
    filtered = pq.read_metadata(store.part("filtered_documents", "revuelto")).num_rows
    assert filtered >= SALAD // 2  # with the integrity rules off, no published rule sees word order
    assert stats.extra["enabled"] and not stats.extra["retrained"]  # scored by the model of the manual
    assert _dropped(store, "revuelto") == filtered
    assert pq.read_metadata(store.part("deduped_documents", "revuelto")).num_rows == 0


def test_good_pages_lose_under_three_percent(scored) -> None:
    store, shards, _, _ = scored
    manual = [s for s in shards if s != "revuelto"]
    passed = sum(pq.read_metadata(store.part("filtered_documents", s)).num_rows for s in manual)
    lost = sum(_dropped(store, s) for s in manual)
    assert passed > 100 and lost / passed < 0.03, (lost, passed)


def test_a_changed_shard_set_is_scored_by_the_same_model(scored) -> None:
    """Not retrained when the shards change but the corpus has not doubled: the shards
    that stay keep their scores, and so their deduped outputs."""
    store, shards, stats, cfg = scored
    from stages.data.quality import quality_stage

    again = quality_stage(store, shards, cfg)
    assert again.cached
    fewer = quality_stage(store, shards[:-1], cfg)
    assert not fewer.extra["retrained"] and fewer.extra["model_hash"] == stats.extra["model_hash"]
    assert fewer.extra["shard_digests"] == {s: d for s, d in stats.extra["shard_digests"].items() if s in shards[:-1]}
    assert quality_stage(store, shards, cfg).extra["shard_digests"] == stats.extra["shard_digests"]


def test_the_model_and_its_scores_live_in_an_s3_home_and_another_machine_reads_them(s3_server, tmp_path,
                                                                                    monkeypatch) -> None:
    """The trained path on a home in a bucket (moto's S3 server): the model and every
    shard's scores are committed as files of the version, and a second machine, with an
    empty cache, reads a shard's decisions and finds the model current."""
    import s3fs

    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.ingest import clean_stage, filter_stage, read_stage
    from stages.data.quality import current_digests, quality_stage, scores_file, shard_decisions
    from stages.store.keys import upstream_key
    from stages.store.outputs import DataStore

    monkeypatch.setenv("YUNQUE_S3_ENDPOINT", s3_server)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    fs.mkdir("quality-home")
    for i, (source, html) in enumerate(good_pages("es")[:60]):
        path = tmp_path / "corpus" / f"manual{i % 2}" / source.replace("/", "_")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    cfg = preset("tiny", {"language": "es", "filters.learned.min_documents": 40})
    monkeypatch.setenv("YUNQUE_CACHE", str(tmp_path / "a"))
    store = DataStore("s3://quality-home/h")
    cfs, root = open_corpus(str(tmp_path / "corpus"))
    shards = []
    for info in list_shards(cfs, root):
        read_stage(store, cfs, root, info, cfg)
        clean_stage(store, info.key, cfg)
        filter_stage(store, info.key, cfg)
        shards.append(info.key)
    stats = quality_stage(store, shards, cfg)
    assert stats.extra["enabled"] and stats.extra["retrained"]
    listed = {p.rsplit("/", 1)[1] for p in fs.find("quality-home/h/data/quality_model")}
    assert {"model.zip", *(scores_file(s) for s in shards)} <= listed

    monkeypatch.setenv("YUNQUE_CACHE", str(tmp_path / "b"))  # another machine
    other = DataStore("s3://quality-home/h")
    filtered = {s: upstream_key(other, "filtered_documents", s) for s in shards}
    assert current_digests(other, cfg, filtered) == stats.extra["shard_digests"]
    digest, _, threshold = shard_decisions(other, shards[0], filtered[shards[0]])
    assert digest == stats.extra["shard_digests"][shards[0]] and threshold == stats.extra["threshold"]
