"""LSH clusters and exact paragraph dedup: planted duplicates found, decisions order-free.
Through Dagster: a shard that keeps nothing is a zero-row materialization down to
token_shards, a stale index is a failure that says what to do, failed checks say so."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.data.dedup.clusters import (
    drop_lines,
    estimated_jaccard_pairs,
    lsh_clusters,
    paragraph_drops,
    paragraph_hashes,
)
from pipelines.data.dedup.minhash import EMPTY, compute_signatures
from stages.store.outputs import DataStore
from tests.pipelines.data.dedup_corpus import CFG, PLANTED, corpus
from tests.support.factory import recommit


def removed_ids(ids: list[str], texts: list[str]) -> tuple[set[str], dict[str, str]]:
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    keeper_of = {ids[i]: ids[int(cl.keeper[i])] for i in range(len(ids))}
    return {ids[i] for i in cl.to_remove}, keeper_of


def test_planted_cluster_found_and_keeper_is_min_doc_id() -> None:
    ids, texts = corpus()
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    assert cl.n_clusters == 1
    labels = cl.labels[list(PLANTED)]
    assert (labels >= 0).all() and (labels == labels[0]).all()
    others = np.setdiff1d(np.arange(len(ids)), PLANTED)
    assert (cl.labels[others] == -1).all()  # distinct documents don't cluster
    assert (cl.keeper[others] == others).all()
    assert min(ids[i] for i in PLANTED) == ids[150] == "doc-0150"
    assert (cl.keeper[list(PLANTED)] == 150).all()
    assert sorted(cl.to_remove.tolist()) == [42, 199]


def test_result_independent_of_input_order() -> None:
    ids, texts = corpus()
    want_removed, want_keeper = removed_ids(ids, texts)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(len(ids))
        got_removed, got_keeper = removed_ids([ids[i] for i in perm], [texts[i] for i in perm])
        assert got_removed == want_removed
        assert got_keeper == want_keeper


def test_empty_documents_never_cluster() -> None:
    ids, texts = corpus()
    empties = ["", "   ", "¡¿!?", "", "— —"]
    texts = texts + empties
    ids = ids + [f"empty-{i}" for i in range(len(empties))]
    sigs = compute_signatures(texts, CFG)
    assert (sigs[-len(empties) :] == EMPTY).all()
    cl = lsh_clusters(sigs, ids, CFG)
    assert (cl.labels[-len(empties) :] == -1).all()
    assert cl.n_clusters == 1 and cl.to_remove.size == 2
    # only empty documents: nothing to bucket at all
    only = lsh_clusters(compute_signatures(empties, CFG), [str(i) for i in range(5)], CFG)
    assert only.n_clusters == 0 and only.to_remove.size == 0


def test_exact_duplicates_cluster_transitively() -> None:
    texts = ["uno dos tres cuatro cinco seis siete"] * 4 + ["otra cosa muy distinta aquí"]
    ids = ["d", "b", "c", "a", "e"]
    cl = lsh_clusters(compute_signatures(texts, CFG), ids, CFG)
    assert cl.n_clusters == 1
    assert cl.keeper.tolist() == [3, 3, 3, 3, 4]
    assert sorted(cl.to_remove.tolist()) == [0, 1, 2]


def test_lsh_edge_cases() -> None:
    empty = lsh_clusters(np.empty((0, CFG.num_perm), dtype=np.uint32), [], CFG)
    assert empty.labels.size == 0 and empty.to_remove.size == 0
    with pytest.raises(ValueError, match="signatures have"):
        lsh_clusters(np.zeros((2, 10), dtype=np.uint32), ["a", "b"], CFG)


def test_paragraph_drops_keep_first_by_doc_id() -> None:
    ids = ["b", "a", "c"]
    hashes = [[1, 2, 0], [2, 3, 0], [1, 0, 3, 4, 4]]
    # "a" (index 1) comes first: keeps 2 and 3; "b" keeps 1 and loses 2; "c" loses 1 and
    # 3; the repeat of 4 inside "c" and the short lines (hash 0) are never dropped.
    assert paragraph_drops(ids, hashes) == ({0: [1], 2: [0, 2]}, set())
    assert paragraph_drops([], []) == ({}, set())


def test_a_document_rejected_as_too_short_does_not_claim_its_paragraphs() -> None:
    # "b" shares paragraph 7 with "a" (smaller id, so "b" loses it) and would own
    # paragraph 9, but is too short once 7 is gone: it is rejected, and "c" keeps 9.
    chars = [[100, 50], [100, 100], [100, 100]]
    ids = ["b", "a", "c"]
    hashes = [[7, 9], [7, 8], [9, 5]]
    drops, rejected = paragraph_drops(ids, hashes, chars, min_chars=80)
    assert drops == {0: [0]} and rejected == {0}  # "b" lost 7 to "a", 50 chars left
    # without the rule "c" would lose paragraph 9 to the rejected "b"
    assert paragraph_drops(ids, hashes)[0] == {0: [0], 2: [0]}


def test_paragraph_hashes_and_drop_lines() -> None:
    shared = "Este párrafo se repite en varias páginas de la ayuda de LibreOffice."
    a = f"Título\n{shared}\nTexto propio del documento A, bastante largo para contar."
    b = f"Otro título\n  {shared.upper().replace(' ', '   ')}  \nVéase también"
    ha, hb = paragraph_hashes(a, CFG.min_paragraph_chars), paragraph_hashes(b, 40)
    assert ha[0] == 0 and hb[0] == 0 and hb[2] == 0  # short lines are not deduped
    assert ha[1] == hb[1] != 0  # case and whitespace are ignored
    assert len(ha) == len(a.split("\n"))
    drops, _ = paragraph_drops(["doc-b", "doc-a"], [hb, ha])
    assert drops == {0: [1]}
    assert drop_lines(b, drops[0]) == "Otro título\nVéase también"
    assert drop_lines("x\ny\nz", []) == "x\ny\nz"
    assert drop_lines("x\ny\nz", [0, 2]) == "y"


def test_estimated_jaccard_pairs() -> None:
    _, texts = corpus()
    sample = [texts[PLANTED[0]], texts[3], texts[PLANTED[1]], "", texts[5], ""]
    sigs = compute_signatures(sample, CFG)
    pairs = estimated_jaccard_pairs(sigs, 0.8)
    assert [(i, j) for i, j, _ in pairs] == [(0, 2)]  # copies 0 and 1; empties never pair
    assert 0.8 <= pairs[0][2] <= 1.0
    assert estimated_jaccard_pairs(sigs, 1.01) == []



@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A real instance and home with the data graph materialized shard by shard, as a
    backfill runs it, on a corpus where shard `ingles` keeps nothing (all English) and
    `bueno` holds an exact copy of one of its documents. Yields the results and a runner."""
    import json

    import dagster as dg

    from assets.definitions import ASSETS, CHECKS, build_resources
    from tests.support.factory import ENGLISH, add_shard

    tmp = tmp_path_factory.mktemp("graph")
    corpus, home = tmp / "corpus", tmp / "home"
    add_shard(corpus, "bueno", docs=8)
    (corpus / "bueno" / "copia.txt").write_text((corpus / "bueno" / "doc0.txt").read_text(encoding="utf-8"))
    (corpus / "ingles").mkdir()
    for i in range(3):
        (corpus / "ingles" / f"doc{i}.txt").write_text(f"{ENGLISH} Page {i}.", encoding="utf-8")
    overrides = {"tokenizer.vocab_size": 300, "tokenizer.val_fraction": 0.3}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["bueno", "ingles"])

        def run(keys: tuple[str, ...], shard: str | None = None, checks: tuple[str, ...] = (),
                **more) -> dg.ExecuteInProcessResult:
            resources = build_resources(home=str(home), corpus=str(corpus), overrides=json.dumps(overrides | more))
            selection = dg.AssetSelection.assets(*keys) | dg.AssetSelection.checks(
                *[c for c in CHECKS if c.check_key.name in checks])
            return dg.materialize([*ASSETS, *CHECKS], selection=selection, partition_key=shard, instance=instance,
                                  resources=resources, raise_on_error=False)

        out: dict = {"run": run, "store": DataStore(home)}
        per_shard = ("raw_documents", "clean_documents", "filtered_documents", "minhash_signatures")
        out["per_shard"] = {shard: run(per_shard, shard) for shard in ("bueno", "ingles")}
        out["stale"] = run(("deduped_documents",), "ingles")  # before the index covers it
        out["index"] = run(("dedup_index",))
        out["quality"] = run(("quality_model",))
        out["deduped"] = {shard: run(("deduped_documents",), shard) for shard in ("bueno", "ingles")}
        out["tokenizer"] = run(("tokenizer",))
        out["tokens"] = {shard: run(("token_shards",), shard) for shard in ("bueno", "ingles")}
        yield out


def _materialization(result, asset: str) -> dict:
    import dagster as dg

    mats = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey(asset)]
    assert len(mats) == 1, f"{asset}: {len(mats)} materializations"
    return {k: v.value for k, v in mats[0].materialization.metadata.items()}


def test_a_shard_that_keeps_nothing_materializes_through_token_shards(graph) -> None:
    """A shard whose documents are all rejected is a successful materialization with zero
    rows at every step from filtered_documents to token_shards (a backfill counts a
    partition that yields nothing as failed, with everything downstream)."""
    assert all(r.success for r in graph["per_shard"].values())
    empty = graph["per_shard"]["ingles"]
    assert _materialization(empty, "raw_documents")["dagster/row_count"] == 3
    assert _materialization(empty, "filtered_documents")["dagster/row_count"] == 0
    assert _materialization(empty, "minhash_signatures")["dagster/row_count"] == 0
    assert graph["index"].success
    assert all(r.success for r in graph["deduped"].values())
    assert _materialization(graph["deduped"]["bueno"], "deduped_documents")["dagster/row_count"] == 8
    assert _materialization(graph["deduped"]["ingles"], "deduped_documents")["dagster/row_count"] == 0
    # its checks pass: every document is accounted for (as rejected), nothing impure is kept
    checks = {e.check_name: (e.passed, e.description) for e in graph["deduped"]["ingles"].get_asset_check_evaluations()}
    assert checks["every_document_once"] == (True, "all 3 documents read are accounted for once: 0 kept, 3 rejected")
    assert checks["language_is_pure"][0] is True
    assert graph["tokenizer"].success and all(r.success for r in graph["tokens"].values())
    md = _materialization(graph["tokens"]["ingles"], "token_shards")
    assert md["tokens"] == 0 and md["dagster/row_count"] == 0
    assert _materialization(graph["tokens"]["bueno"], "token_shards")["tokens"] > 0


def test_a_stale_index_fails_deduped_documents_naming_the_shard(graph) -> None:
    stale = graph["stale"]
    assert not stale.success and not stale.get_asset_materialization_events()
    failure = next(e for e in stale.all_events if e.is_step_failure).step_failure_data.user_failure_data
    assert "deduped_documents[ingles]" in failure.description
    assert "Materialize minhash_signatures[ingles], then dedup_index" in failure.description


def _check(result, name: str):
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == name)


def test_failed_checks_say_so_and_name_what_failed(graph) -> None:
    """Each check, made to fail on real files, reads as a failure and names the culprits."""
    import pyarrow as pa

    from pipelines.data.documents import Rejection, rejections_table

    run, store = graph["run"], graph["store"]
    kept = pq.read_table(store.part("deduped_documents", "bueno"))
    # a kept document also rejected, and one kept document labelled English
    victim, english = kept["doc_id"][0].as_py(), kept["doc_id"][1].as_py()
    key = store.manifest("deduped_documents", "bueno")["key"].encode()  # still a cache hit: the checks see this
    pq.write_table(rejections_table([Rejection(victim, "bueno", "x", "dedup", "test", "", None)])
                   .replace_schema_metadata({b"yunque_cache_key": key}), store.rejected("bueno", "dedup"))
    langs = ["en" if d == english else lang for d, lang in zip(kept["doc_id"].to_pylist(), kept["lang"].to_pylist())]
    pq.write_table(kept.set_column(kept.schema.get_field_index("lang"), "lang", pa.array(langs)),
                   store.dir("deduped_documents", "bueno") / "part-0.parquet")
    recommit(store, "deduped_documents", "bueno")
    result = run(("deduped_documents",), "bueno", checks=("every_document_once", "language_is_pure"))
    assert _materialization(result, "deduped_documents")["cached"] is True
    once, pure = _check(result, "every_document_once"), _check(result, "language_is_pure")
    assert not once.passed and once.description.startswith("FAILED for shard bueno")
    assert victim in once.description and once.metadata["duplicated_doc_ids"].value == [victim]
    assert not pure.passed and pure.description.startswith("FAILED for shard bueno: 1 kept documents")
    assert [e["doc_id"] for e in pure.metadata["impure_examples"].value] == [english]

    # the index forgets the copy it removed: the sample now holds a near-duplicate pair
    near = store.dir("dedup_index") / "near_duplicates.parquet"
    removed = pq.read_table(near)
    assert removed.num_rows == 1
    pq.write_table(removed.slice(0, 0), near)
    recommit(store, "dedup_index")
    dup = _check(run((), checks=("no_near_duplicates_left",)), "no_near_duplicates_left")
    assert not dup.passed and dup.description.startswith("FAILED: 1 pairs")
    assert {p["doc_id_a"] for p in dup.metadata["pairs_found"].value} | \
        {p["doc_id_b"] for p in dup.metadata["pairs_found"].value} == {removed["doc_id"][0].as_py(),
                                                                        removed["keeper_doc_id"][0].as_py()}

    words = _check(run((), checks=("tokens_per_word",), **{"tokenizer.max_tokens_per_word": 0.5}), "tokens_per_word")
    assert not words.passed and words.description.startswith("FAILED: es needs")
    fine = _check(run((), checks=("tokens_per_word",), **{"tokenizer.max_tokens_per_word": 50.0}), "tokens_per_word")
    assert fine.passed and "within the limit" in fine.description

