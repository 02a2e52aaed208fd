"""Decontamination: the n-gram index's recall on planted copies (exact and edited) and its
false positives, then eval_contamination through Dagster on a corpus with planted
evaluation items: the blocking check stops base_model, and the purified split passes."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.data.decontamination import Bloom, EvalItem, NgramIndex
from pipelines.data.words import normalize_for_dedup
from pipelines.tasks import math_tasks
from tests.support.factory import SMALL_TRAIN, spanish_text, write_two_shards
from yunque import env

PLANTED = 50


def _items(rng: random.Random) -> list[EvalItem]:
    """50 evaluation items as the project has them: 25 held-out math problems (both
    wordings) and 25 passages of Spanish prose (a domain QA answer, a user's item)."""
    math = math_tasks.math_eval_set("es_add2", 13, seed=3) + math_tasks.math_eval_set("es_add2_rephrased", 12, seed=3)
    prose = [spanish_text(rng, paragraphs=1, sentences=rng.randint(2, 4)) for _ in range(25)]
    return [EvalItem("math", p.id, p.question) for p in math] + [EvalItem("prose", f"p{i}", t)
                                                                  for i, t in enumerate(prose)]


def _edit(text: str, how: str, rng: random.Random) -> tuple[str, int | None]:
    """A light edit of `text`: (the edited text, the word position changed, if any)."""
    if how == "exact":
        return text, None
    if how == "casing":
        return text.upper(), None
    if how == "punctuation":
        return text.replace(".", " ;").replace("?", "!").replace(",", ""), None
    words = text.split()
    at = rng.randrange(len(words))
    words[at] = "palabracambiada"
    return " ".join(words), at


def _expected_found(edited: str, at: int, n: int, min_words: int) -> bool:
    """With the word at `at` changed, a copy can only be found through an n-gram that
    misses it: one wholly before or wholly after it (the runs of `min_words` words for an
    item shorter than n). Words are counted after the normalisation."""
    length = len(normalize_for_dedup(edited, fold_digits=False))
    if length < min_words:  # looked for whole: any change hides it
        return False
    k = n if length >= n else min_words
    return at >= k or length - at - 1 >= k


def _corpus(rng: random.Random, docs: int) -> list[str]:
    return [spanish_text(rng, paragraphs=3) for _ in range(docs)]


@pytest.mark.parametrize("how", ["exact", "casing", "punctuation", "one_word"])
def test_planted_copies_are_found(how):
    """50 items planted into 50 of 400 training documents: every exact copy is found in
    the document it was planted in, and so are the copies whose casing or punctuation
    changed (the normalisation drops both). With one word changed, a copy is found exactly
    when an n-gram of it misses the changed word; the recall is printed."""
    rng = random.Random(7)
    items = _items(rng)
    docs = _corpus(rng, 400)
    where = rng.sample(range(len(docs)), PLANTED)
    changed = {}
    for i, d in enumerate(where):
        text, at = _edit(items[i].text, how, rng)
        if at is not None:  # (the edited text, where the changed word sits among its normalised words)
            changed[i] = (text, len(normalize_for_dedup(" ".join(text.split()[:at]), fold_digits=False)))
        docs[d] = f"{docs[d]}\n\n{text}\n\n{spanish_text(rng, paragraphs=1)}"
    index = NgramIndex(items)
    found = {(d, i) for d, i, _ in index.scan(docs)}
    recall = sum((d, i) in found for i, d in enumerate(where)) / PLANTED
    print(f"{how}: recall {recall:.2f} ({PLANTED} planted)")
    assert {d for d, _ in found} <= set(where), "a document nothing was planted in was flagged"
    if how == "one_word":
        expected = {i for i in range(PLANTED) if _expected_found(*changed[i], 13, 8)}
        assert {i for d, i in found} == expected
        assert 0 < len(expected) < PLANTED  # both kinds occur: the figure means something
    else:
        assert recall == 1.0


def test_no_false_positives_on_clean_text():
    """Items never planted, 2,000 documents of the same vocabulary: nothing is found."""
    rng = random.Random(11)
    index = NgramIndex(_items(rng))
    assert index.scan(_corpus(rng, 2000)) == []


def test_short_items_use_runs_of_min_words_or_all_their_words():
    items = [EvalItem("s", "long", " ".join(f"w{i}" for i in range(20))),
             EvalItem("s", "medium", "uno dos tres cuatro cinco seis siete ocho nueve"),
             EvalItem("s", "short", "Calcula 79 + 61."),
             EvalItem("s", "tiny", "dos más")]
    index = NgramIndex(items, ngram=13, min_words=8)
    assert index.checkable.tolist() == [True, True, True, False]
    hits = index.scan(["texto dos tres cuatro cinco seis siete ocho nueve fin",  # 8 words of "medium"
                       "Primero calcula 79 más 61 y luego calcula 79 + 61 de nuevo.",  # "short", whole, once
                       "dos más",  # "tiny" is never looked for
                       " ".join(f"w{i}" for i in range(5, 17)),  # 12 of "long"'s words: no 13-gram
                       "calcula 79 + 6"])  # part of "short" is not "short"
    assert [(d, items[i].item_id) for d, i, _ in hits] == [(0, "medium"), (1, "short")]


def test_digits_are_kept():
    """Two problems from one template differ in their numbers: one leaked is not both."""
    a = "Ana tiene 23 manzanas y compra 45 más en el mercado del pueblo cada semana ¿cuántas tiene ahora?"
    b = a.replace("23", "31").replace("45", "12")
    index = NgramIndex([EvalItem("m", "a", a), EvalItem("m", "b", b)])
    assert {index.items[i].item_id for _, i, _ in index.scan([f"Texto. {a} Fin."])} == {"a"}


def test_bloom_filter_has_no_false_negatives_and_about_its_error_rate():
    rng = np.random.default_rng(0)
    present = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
    bloom = Bloom(present.size, 1e-3)
    bloom.add(present)
    assert bloom.test(present).size == present.size
    absent = rng.integers(0, 2**63, 200_000, dtype=np.uint64)
    assert bloom.test(absent).size / absent.size < 2e-3


# ---- through Dagster ---------------------------------------------------------------

OVERRIDES = {"tokenizer.vocab_size": 512, "tokenizer.val_fraction": 0.3, **SMALL_TRAIN}


@pytest.fixture(scope="module")
def planted_home(tmp_path_factory):
    """The two-shard corpus plus a shard whose documents carry copies of 8 of the 20 items
    of a user's evaluation file; the data half materialized once."""
    root = tmp_path_factory.mktemp("decon")
    with pytest.MonkeyPatch.context() as mp:  # env.use_home sets YUNQUE_HOME and DAGSTER_HOME: undone after
        for k in ("YUNQUE_HOME", "DAGSTER_HOME"):
            mp.setenv(k, os.environ.get(k, ""))
        home = env.use_home(root / "home")
        corpus = root / "corpus"
        write_two_shards(corpus)
        rng = random.Random(5)
        items = [spanish_text(rng, paragraphs=1, sentences=3) for _ in range(20)]
        evals = root / "mis_evaluaciones.jsonl"
        evals.write_text("".join(json.dumps({"question": t, "answer": "#### 1"}, ensure_ascii=False) + "\n"
                                 for t in items), encoding="utf-8")
        (corpus / "plantado").mkdir()
        for i in range(12):
            planted = f"\n\n{items[i]}\n\n" if i < 8 else "\n\n"
            (corpus / "plantado" / f"doc{i}.txt").write_text(spanish_text(rng) + planted + spanish_text(rng, 2),
                                                             encoding="utf-8")
        from orchestration.runner import run_graph

        summary = run_graph(str(corpus), select="+key:token_shards", overrides=json.dumps(OVERRIDES))
        assert summary.ok, [r["error"] for r in summary.runs if not r["ok"]]
        yield home, corpus, evals, items


def _materialize(home: Path, corpus: Path, overrides: dict, keys: tuple[str, ...]) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = build_resources(home=str(home), corpus=str(corpus), overrides=json.dumps(overrides))
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
                          instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)


def _train_split_planted(home: Path, items: list[str]) -> set[str]:
    """The items planted in documents that the split put in training (the others sit in
    validation documents, which nobody trains on)."""
    from stages.data.domain_qa import document_splits
    from stages.store.outputs import DataStore

    store = DataStore(home)
    splits = document_splits(store, "plantado")
    docs = pq.read_table(store.part("deduped_documents", "plantado"), columns=["doc_id", "text"]).to_pylist()
    return {f"mis_evaluaciones.jsonl:line {i + 1}" for d in docs if splits.get(d["doc_id"]) == "train"
            for i, t in enumerate(items[:8]) if t in d["text"]}


def test_the_check_blocks_base_model_and_the_purified_split_passes(planted_home):
    from stages.config import preset
    from stages.data.decontamination import ASSET, PURIFIED
    from stages.store.outputs import DataStore
    from stages.training.pretrain import prepare
    from stages.training.runs import PretrainError

    home, corpus, evals, items = planted_home
    expected = _train_split_planted(home, items)
    assert expected, "no planted copy landed in the training split: the test would prove nothing"
    overrides = OVERRIDES | {"decontamination.eval_files": [str(evals)]}

    # 1. contaminated: the blocking check fails and base_model does not run
    result = _materialize(home, corpus, overrides, ("eval_contamination", "base_model"))
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    check = checks["no_eval_contamination"]
    assert not check.passed and check.description.startswith("FAILED"), check.description
    assert not result.asset_materializations_for_node("base_model")
    store = DataStore(home)
    report = json.loads((store.dir(ASSET) / "report.json").read_text())
    assert set(report["sets"]) >= {"es_add2", "es_add2_rephrased", "domain_qa", "mis_evaluaciones.jsonl"}
    found = pq.read_table(store.dir(ASSET) / "hits.parquet").to_pylist()
    assert {h["item_id"] for h in found} == expected  # every planted training copy, nothing else
    assert {h["shard"] for h in found} == {"plantado"}
    assert report["sets"]["mis_evaluaciones.jsonl"]["contaminated"] == len(expected)
    # ...and base_model refuses on its own too (a run that selects it alone)
    with pytest.raises(PretrainError, match="eval_contamination found evaluation items"):
        prepare(store, ["foro", "manuales", "plantado"], preset("default", overrides))

    # 2. purified: the check passes, the documents are recorded as rejected, base_model
    # trains on the purified split
    purify = overrides | {"decontamination.purify": True}
    result = _materialize(home, corpus, purify, ("eval_contamination",))
    check = next(e for e in result.get_asset_check_evaluations() if e.check_name == "no_eval_contamination")
    assert check.passed, check.description
    rejected = pq.read_table(store.rejected("plantado", "decontamination")).to_pylist()
    assert {r["reason"] for r in rejected} == {"eval_contamination"}
    assert len(rejected) == len({h["doc_id"] for h in found})
    assert all(any(t in r["text"] for t in items[:8]) for r in rejected)
    from pipelines.tokens.token_format import TokenShard

    original = TokenShard.open(store.dir("token_shards", "plantado"))
    purified = TokenShard.open(store.dir(ASSET) / PURIFIED / "plantado")
    purified.verify()
    assert purified.split("train").documents == original.split("train").documents - len(rejected)
    assert purified.split("val").documents == original.split("val").documents
    spec = prepare(store, ["foro", "manuales", "plantado"], preset("default", purify))
    assert str(store.dir(ASSET) / PURIFIED / "plantado") in spec.config["train"]["shards"]
    assert spec.lineage["decontamination"].startswith("passed")
