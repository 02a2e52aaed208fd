"""The learned quality signal (pipelines/data/quality/): its corruptions do what they say, its
training set keeps held-out pages apart, its threshold is the calibrated quantile, training
is reproducible, and on real text it separates: trained on part of the GIMP manual's pages
(tests/data/docs_eval/), it drops the word salad docs_eval makes from the OTHER pages and
keeps those pages.

    .venv/bin/pytest -q tests/pipelines/data/test_quality_model.py -s     # also prints each language's figures
"""

from __future__ import annotations

import random
from collections import Counter
from functools import cache
from itertools import pairwise

import numpy as np
import pytest

from pipelines.config import LearnedQualityConfig
from pipelines.data.extract import html_to_text
from pipelines.data.filters.text import sentence_spans
from pipelines.data.quality import (
    CORRUPTIONS,
    MAX_THRESHOLD,
    MAX_TOKENS,
    RULE,
    QualityModel,
    TrainingSet,
    calibrate_threshold,
    corrupt,
    normalise,
    train,
    training_set,
)
from pipelines.data.quality.training import GOOD_EXAMPLE, MIN_TRAIN_PAGES, REJECTED
from tests.support.docs_eval_junk import word_salad
from tests.support.docs_eval_pages import good_pages

OTHER = {"es": "fr", "fr": "es"}  # the foreign texts of mixed_languages
SALAD = {"es": 40, "fr": 32}  # word-salad documents per language: their pages are held out
PAGE = """La herramienta Recortar elimina los bordes de una imagen. Se activa desde el menú.

Opciones de la herramienta
Puede fijar la relación de aspecto: 4:3, 16:9 o cualquier otra. El recorte se confirma con Intro.
Pulse Esc para cancelar."""
FOREIGN = "The crop tool removes the edges of an image. It is in the Tools menu.\nPress Escape."


@cache
def texts(language: str) -> tuple[str, ...]:
    """The language's good pages as the HTML extractor gives them."""
    return tuple(html_to_text(html) for _, html in good_pages(language))


def salad_pages(language: str) -> set[int]:
    """The pages docs_eval's word_salad(i) shuffles, i < SALAD[language] (see its index)."""
    n = len(good_pages(language))
    return {(i * 13 + 5) % n for i in range(SALAD[language])}


def split(language: str) -> tuple[list[str], list[str]]:
    """(pages to train on, unseen pages): the unseen ones are those the salad is made of."""
    held = salad_pages(language)
    pages = texts(language)
    return ([t for i, t in enumerate(pages) if i not in held],
            [t for i, t in enumerate(pages) if i in held])


def salad(language: str) -> list[str]:
    """docs_eval's word salad (shuffled words of unseen pages, repunctuated) as text."""
    out = []
    for i in range(SALAD[language]):
        name, content = word_salad(random.Random(i), i, language)
        out.append(html_to_text(content) if name.endswith(".html") else content)
    return out


# --- corruptions ---------------------------------------------------------------------------


def _sentences(text: str) -> list[str]:
    """The units the corruptions move: the sentences of each line."""
    return [line[a:b] for line in text.split("\n") for a, b in sentence_spans(line)]


def _order(sentences: list[str], text: str) -> list[int]:
    """Where each sentence starts in `text` (all must be there)."""
    at = [text.find(s) for s in sentences]
    assert -1 not in at, [s for s, i in zip(sentences, at) if i < 0]
    return at


def test_shuffled_words_keeps_every_word_and_line_length() -> None:
    out = corrupt(PAGE, "shuffled_words", random.Random(1))
    assert out != PAGE
    assert sorted(out.split()) == sorted(PAGE.split())
    assert [len(line.split()) for line in out.split("\n")] == [len(line.split()) for line in PAGE.split("\n")]


def test_shuffled_sentences_reorders_whole_sentences() -> None:
    out = corrupt(PAGE, "shuffled_sentences", random.Random(1))
    at = _order(_sentences(PAGE), out)  # every sentence intact
    assert at != sorted(at)  # in another order
    assert sorted(out.split()) == sorted(PAGE.split())  # and nothing else
    assert out.count("\n") == PAGE.count("\n")


def test_cut_lines_shuffles_runs_of_words() -> None:
    page = "\n".join(texts("es")[:3])
    out = corrupt(page, "cut_lines", random.Random(1))
    assert sorted(out.split()) == sorted(page.split())
    # Runs of CUT_MIN..CUT_MAX words survive, so most word pairs are still next to each
    # other (about 3 in 4), but not all; shuffled words keep almost none.
    pairs = Counter(zip(page.split(), page.split()[1:]))

    def kept(text: str) -> float:
        words = text.split()
        return sum(pairs[p] > 0 for p in pairwise(words)) / (len(words) - 1)

    assert 0.5 < kept(out) < 0.95
    assert kept(corrupt(page, "shuffled_words", random.Random(1))) < 0.25


def test_mixed_languages_interleaves_foreign_sentences() -> None:
    out = corrupt(PAGE, "mixed_languages", random.Random(1), foreign=[FOREIGN])
    own, foreign = _sentences(PAGE), _sentences(FOREIGN)
    at = _order(own, out)
    assert at == sorted(at)  # the page's sentences, in order
    rest = out
    for s in own:
        rest = rest.replace(s, "\n", 1)
    between = [b.strip() for b in rest.split("\n") if b.strip()]
    assert len(between) == len(own) and set(between) <= set(foreign)  # one foreign after each
    assert out.count("\n") == PAGE.count("\n")


def test_mixed_languages_without_foreign_text_is_cut_lines() -> None:
    alone = corrupt(PAGE, "mixed_languages", random.Random(5))
    assert alone == corrupt(PAGE, "cut_lines", random.Random(5))
    assert corrupt(PAGE, "mixed_languages", random.Random(5), foreign=["  \n"]) != PAGE


def test_unknown_corruption_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown corruption 'reversed'"):
        corrupt(PAGE, "reversed", random.Random(1))


def test_normalise_reads_words_and_punctuation_lowercased() -> None:
    assert normalise("Hola, Mundo!\nPágina 42.") == "hola , mundo ! página 00 ."
    assert "__label__" not in normalise("__label__good spam")  # never a fastText label
    assert normalise("a b c d e", max_tokens=3) == "a b c"
    assert normalise("x" * 40 + " y", max_tokens=2) == "x" * 40 + " y"  # long tokens still read


# --- the training set ----------------------------------------------------------------------


def test_training_set_holds_pages_out_with_their_corruptions() -> None:
    cfg = LearnedQualityConfig(seed=3)
    passed = list(texts("es")[:60])
    rejected = ["Inicio | Productos | Contacto"] * 3 + [f"Oferta {i} barata barata" for i in range(5)]
    ts = training_set(passed, rejected + [passed[0]], cfg, foreign=texts("fr")[:20])
    again = training_set(passed, rejected + [passed[0]], cfg, foreign=texts("fr")[:20])
    assert ts == again  # deterministic in cfg.seed
    assert set(ts.train_good).isdisjoint(ts.heldout_good)
    assert sorted(ts.train_good + ts.heldout_good) == sorted(passed)
    assert passed[0] not in ts.train_bad + ts.heldout_bad  # a "rejection" equal to a kept page
    # Balanced: every good page weighs as much as the bad side it brings.
    assert len(ts.train_good) * ts.good_weight == len(ts.train_bad)
    assert ts.good_weight == min(3, -(-MIN_TRAIN_PAGES // len(ts.train_good)))
    # Every held-out page in every kind, and as many rule rejections (scored, not trained on).
    kinds = Counter(ts.heldout_bad_sources)
    assert {k: kinds[k] for k in CORRUPTIONS} == {k: len(ts.heldout_good) for k in CORRUPTIONS}
    assert kinds[REJECTED] == len(rejected) < len(ts.heldout_good)
    held_bags = {tuple(sorted(t.split())) for t in ts.heldout_good}
    for text, kind in zip(ts.heldout_bad, ts.heldout_bad_sources):
        if kind == "shuffled_words":
            assert tuple(sorted(text.split())) in held_bags
    # Trained on: neither the rejections nor shuffled sentences (see training.py).
    assert set(ts.train_bad_sources) == {"shuffled_words", "cut_lines", "mixed_languages"}


def test_training_set_without_foreign_text_leaves_mixed_languages_out() -> None:
    ts = training_set(texts("es")[:30], [], LearnedQualityConfig())
    assert "mixed_languages" not in ts.train_bad_sources + ts.heldout_bad_sources


def test_good_examples_are_trained_on_never_held_out() -> None:
    good = list(texts("fr")[:5])
    ts = training_set(texts("es")[:30], [], LearnedQualityConfig(), good_examples=good)
    assert ts.train_good[:5] == good and ts.train_good_sources[:5] == [GOOD_EXAMPLE] * 5
    assert set(good).isdisjoint(ts.heldout_good)


def test_training_set_needs_two_pages() -> None:
    with pytest.raises(ValueError, match="1 rule-passing documents"):
        training_set(["Una página."], [], LearnedQualityConfig())


# --- the threshold -------------------------------------------------------------------------


def test_calibrated_threshold_loses_at_most_max_good_loss() -> None:
    scores = np.linspace(0.0, 0.4, 201)  # all below the cap
    for loss in (0.0, 0.01, 0.05, 0.2):
        t = calibrate_threshold(scores, loss)
        assert np.mean(scores < t) <= loss
        assert np.mean(scores < np.nextafter(t, 1)) > loss  # and it is the highest such
    assert calibrate_threshold([0.9, 0.95, 0.99], 0.5) == MAX_THRESHOLD  # never above 0.5
    with pytest.raises(ValueError, match="no held-out good scores"):
        calibrate_threshold([], 0.01)


# --- training ------------------------------------------------------------------------------


@cache
def trained(language: str, **fields: object) -> tuple[QualityModel, list[str], list[str]]:
    """(model trained on the language's training pages, unseen pages, word salad)."""
    cfg = LearnedQualityConfig(**fields)
    pages, unseen = split(language)
    return train(training_set(pages, [], cfg, foreign=texts(OTHER[language])), cfg), unseen, salad(language)


@pytest.mark.parametrize("language", ["es", "fr"])
def test_drops_word_salad_of_unseen_pages_and_keeps_them(language: str) -> None:
    model, unseen, junk = trained(language)
    good, bad = model.score(unseen), model.score(junk)
    lost, caught = float(np.mean(good < model.threshold)), float(np.mean(bad < model.threshold))
    r = model.report
    print(f"\n{language}: threshold {model.threshold:.3f}; unseen pages lost {lost:.1%} of {len(good)} "
          f"(lowest {good.min():.3f}); word salad dropped {caught:.1%} of {len(bad)} (highest {bad.max():.3f}); "
          f"held-out recall {r['heldout_bad_recall']}; {r['model_bytes'] / 1e6:.1f} MB")
    assert caught >= 0.95
    assert lost <= 0.03
    assert r["heldout_bad_recall"]["shuffled_words"] >= 0.95
    assert r["heldout_good_loss"] <= 0.03
    assert r["threshold"] == model.threshold == r["calibrated_threshold"] <= MAX_THRESHOLD
    assert np.array_equal(model.drops(bad), bad < model.threshold)


def test_word_order_is_what_it_learns() -> None:
    """With single words (word_ngrams=1) a page and its shuffled words are the same bag."""
    model, unseen, _ = trained("es", word_ngrams=1)
    unseen = [t for t in unseen if len(normalise(t, 10**6).split()) < MAX_TOKENS]  # all read
    assert len(unseen) >= 10
    copies = [corrupt(t, "shuffled_words", random.Random(i)) for i, t in enumerate(unseen)]
    assert np.allclose(model.score(unseen), model.score(copies), atol=1e-4)
    pairs, _, _ = trained("es")
    assert np.all(pairs.score(copies) < pairs.score(unseen) - 0.3)


def test_training_is_reproducible() -> None:
    """The same inputs give the same scores and the same file, also after other models were
    trained in the process (fastText leaves most of its matrix as malloc found it: see classifier.py).
    dim 16 keeps the matrix small enough for glibc to recycle a freed block."""
    pages, unseen = split("fr")
    cfg = LearnedQualityConfig(dim=16)
    ts = training_set(pages[:40], [], cfg, foreign=texts("es")[:30])
    first = train(ts, cfg)
    for dim in (8, 16):
        other = LearnedQualityConfig(dim=dim, seed=2)
        train(training_set(split("es")[0][:40], [], other), other)
    again = train(ts, cfg)
    assert np.array_equal(again.score(unseen), first.score(unseen))
    assert again.to_bytes() == first.to_bytes()  # the same file: callers hash it


def test_fixed_threshold_is_used_and_saved(tmp_path) -> None:
    cfg = LearnedQualityConfig(threshold=0.2)
    pages, unseen = split("fr")
    model = train(training_set(pages[:30], [], cfg), cfg)
    assert model.threshold == 0.2 and model.report["threshold_fixed"]
    assert model.report["calibrated_threshold"] <= MAX_THRESHOLD
    path = tmp_path / "quality.model"
    model.save(path)
    loaded = QualityModel.load(path)
    assert loaded.threshold == 0.2 and loaded.report == model.report
    assert np.array_equal(loaded.score(unseen), model.score(unseen))
    assert loaded.score(unseen).dtype == np.float32
    assert QualityModel.from_bytes(model.to_bytes()).threshold == 0.2
    (tmp_path / "bad.model").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.model: not a learned quality model"):
        QualityModel.load(tmp_path / "bad.model")


def test_cannot_train_without_both_sides() -> None:
    with pytest.raises(ValueError, match="both sides"):
        train(TrainingSet(["a b c"], [], ["d e f"], []), LearnedQualityConfig())
    assert RULE == "learned_quality:score"
