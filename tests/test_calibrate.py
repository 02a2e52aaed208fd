"""Per-rule metrics (`QualityFilters.evaluate`, `rules`), filter profiles, and threshold
calibration: proposals from metric distributions, saved in a home and adopted by id."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import TypeAdapter

from pipelines.config import FilterConfig, apply_profile, filter_profile
from pipelines.data.calibrate import Proposal, apply_thresholds, propose
from pipelines.data.filters import QualityFilters, RuleSpec, reasons
from stages.config import nest
from stages.filter_profile import filters_key, load_proposal, resolve_filters, save_proposal
from stages.store import DataStore
from tests.test_filters import _CASES, PARAGRAPHS, SPANISH
from tests.test_filters_datatrove import _mixed_documents


@pytest.mark.parametrize("profile", ["web", "docs"])
def test_evaluate_returns_what_apply_returns(profile: str) -> None:
    qf = QualityFilters(filter_profile(profile))
    texts = [SPANISH, *(c[1] for c in _CASES), *_mixed_documents(seed=3, count=200)]
    for text in texts:
        out, metrics = qf.evaluate(text)
        assert out == qf.apply(text), text[:200]
        assert set(metrics) == {r for r in reasons(qf.cfg) if getattr(qf.cfg, r.split(":")[0]).enabled}


def test_rules_one_spec_per_reason() -> None:
    cfg = TypeAdapter(FilterConfig).validate_python(
        nest({"profile": "web", "c4.enabled": False, "gopher_quality.min_stop_words": None}))
    specs = QualityFilters(cfg).rules()
    assert [s.reason for s in specs] == list(reasons(cfg))
    by = {s.reason: s for s in specs}
    assert by["gopher_quality:alpha_words_ratio"] == RuleSpec(
        "gopher_quality:alpha_words_ratio", "share of words with a letter", "below", 0.8)
    assert by["gopher_quality:min_stop_words"].threshold is None  # rule off
    assert by["c4:too_few_sentences"].threshold is None  # filter off
    assert by["fineweb:char_dup_ratio"].drop_if == "above" and by["c4:lorem_ipsum"].drop_if == "flag"
    # a disabled filter is not measured
    assert not any(k.startswith("c4:") for k in QualityFilters(cfg).evaluate(SPANISH)[1])


def test_metrics_of_known_texts() -> None:
    qf = QualityFilters(filter_profile("web"))
    lorem = SPANISH + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.\n"
    out, m = qf.evaluate(lorem)
    assert out.reason == "c4:lorem_ipsum" and m["c4:lorem_ipsum"] == 1.0
    assert math.isnan(m["fineweb:line_punct_ratio"])  # C4 dropped it: nothing for FineWeb to judge
    out, m = qf.evaluate(SPANISH)
    assert out.keep and m["c4:lorem_ipsum"] == 0.0 and m["c4:too_few_sentences"] == 12
    assert m["gopher_quality:min_doc_words"] == len(SPANISH.split())
    assert m["fineweb:line_punct_ratio"] == 4 / 5  # the title line has no full stop
    # measured after the first failure: a short text still gets its word count and ratios
    out, m = qf.evaluate("Hola mundo cruel.")
    assert out.reason == "gopher_repetition:top_2_gram"
    assert m["gopher_quality:min_doc_words"] == 3 and m["gopher_quality:alpha_words_ratio"] == 1.0
    _, m = qf.evaluate("")
    assert m["gopher_repetition:empty"] == 1.0 and math.isnan(m["gopher_quality:alpha_words_ratio"])


def test_headings_repeated_are_not_duplicates() -> None:
    """Title, breadcrumb and heading: web (FineWeb as published) drops the page, docs keeps
    it; a sentence repeated, or a heading repeated past the allowance, still counts."""
    h = "Capítulo 17. Filtros de imagen"
    page = f"{h}\nInicio > Manual > {h}\n{h}\n" + SPANISH + f"\n{h}\n"
    assert QualityFilters(filter_profile("web")).apply(page).reason == "fineweb:char_dup_ratio"
    docs = QualityFilters(filter_profile("docs"))
    assert docs.apply(page).keep
    _, m = docs.evaluate(page)
    assert m["fineweb:char_dup_ratio"] == 0.0
    menu = page + f"\n{h}\n" * 6
    assert docs.evaluate(menu)[1]["fineweb:char_dup_ratio"] > 0
    sentence = PARAGRAPHS[0]
    assert docs.evaluate(SPANISH + "\n" + sentence + "\n")[1]["fineweb:char_dup_ratio"] > 0


def test_profiles_and_explicit_fields() -> None:
    web, docs = filter_profile("web"), filter_profile("docs")
    assert FilterConfig() == docs and docs.profile == "docs"
    assert web.gopher_quality.min_doc_words == 50 and web.fineweb.heading_repeats == 0
    assert docs.gopher_quality.min_doc_words < 50 and docs.fineweb.heading_repeats > 0
    # explicit fields win over the profile, the rest follow it
    cfg = TypeAdapter(FilterConfig).validate_python(
        nest({"profile": "web", "gopher_quality.min_doc_words": 7, "fineweb.heading_repeats": 1}))
    assert cfg.gopher_quality.min_doc_words == 7 and cfg.fineweb.heading_repeats == 1
    assert cfg.fineweb.line_punct_thr == web.fineweb.line_punct_thr
    assert cfg.gopher_quality.max_non_alpha_words_ratio == 0.8
    # a full tree switched to another profile (what stages.config.preset holds)
    switched = apply_profile(docs, {"profile": "web"})
    assert switched == web
    assert apply_profile(docs, {"gopher_quality": {"min_doc_words": 3}}) is docs
    # the language adapts what depends on it
    assert filter_profile("docs", "de").gopher_quality.max_avg_word_length > 10
    with pytest.raises(ValueError, match="profile"):
        FilterConfig(profile="blog")  # type: ignore[arg-type]


def _spec(reason: str, drop_if: str, thr: float | None) -> RuleSpec:
    return RuleSpec(reason, "m", drop_if, thr)  # type: ignore[arg-type]


def test_proposal_keeps_the_reference_and_cuts_tails() -> None:
    rng = np.random.default_rng(0)
    corpus_alpha = np.concatenate([rng.uniform(0.85, 1.0, 950), rng.uniform(0.1, 0.5, 50)])
    ref_alpha = rng.uniform(0.72, 1.0, 40)
    corpus_dup = np.concatenate([rng.uniform(0, 0.05, 970), rng.uniform(0.4, 0.9, 30)])
    specs = [_spec("gopher_quality:alpha_words_ratio", "below", 0.8),
             _spec("fineweb:char_dup_ratio", "above", 0.01),
             _spec("gopher_quality:min_doc_words", "below", 50),
             _spec("c4:lorem_ipsum", "flag", 1.0)]
    corpus = {"gopher_quality:alpha_words_ratio": corpus_alpha, "fineweb:char_dup_ratio": corpus_dup,
              "gopher_quality:min_doc_words": rng.integers(20, 500, 1000).astype(float),
              "c4:lorem_ipsum": np.zeros(1000)}
    reference = {"gopher_quality:alpha_words_ratio": ref_alpha,
                 "fineweb:char_dup_ratio": np.full(40, 0.02),
                 "gopher_quality:min_doc_words": np.full(40, 33.0), "c4:lorem_ipsum": np.zeros(40)}
    p = propose(specs, corpus, reference, tail=0.02, margin=0.05)
    by = {r.reason: r for r in p.rules}
    alpha = by["gopher_quality:alpha_words_ratio"]
    assert alpha.proposed <= ref_alpha.min() * 0.95 and alpha.reference_drop_proposed == 0
    assert alpha.reference_drop_current > 0  # 0.8 dropped some reference documents
    assert 0 < alpha.corpus_drop_proposed <= 0.05
    dup = by["fineweb:char_dup_ratio"]
    assert dup.proposed >= 0.021 and dup.reference_drop_proposed == 0
    assert dup.corpus_drop_proposed == pytest.approx(0.02, abs=0.01)  # the tail, past the reference
    words = by["gopher_quality:min_doc_words"]
    assert words.proposed <= 31 and words.proposed == int(words.proposed)  # 33 less 5 %, rounded down
    assert words.reference_drop_proposed == 0
    assert by["c4:lorem_ipsum"].proposed == 1.0  # flags keep theirs
    assert Proposal.from_json(p.to_json()).to_json() == p.to_json()
    # without a reference: the corpus tail only
    alone = {r.reason: r for r in propose(specs, corpus).rules}
    assert alone["gopher_quality:alpha_words_ratio"].reference_drop_proposed is None
    assert alone["gopher_quality:alpha_words_ratio"].corpus_drop_proposed == pytest.approx(0.02, abs=0.002)


def test_adopting_a_proposal(tmp_path) -> None:
    store = DataStore(tmp_path)
    cfg = filter_profile("docs")
    p = propose(QualityFilters(cfg).rules(), {"gopher_quality:alpha_words_ratio": [0.9, 0.95, 0.6],
                                              "gopher_repetition:top_2_gram": [0.01, 0.02, 0.3]})
    thresholds = p.thresholds()
    path = save_proposal(store, p)
    assert path == tmp_path / "calibration" / f"filters-{p.id}.json"
    assert load_proposal(store, p.id).to_json() == p.to_json()
    adopted = TypeAdapter(FilterConfig).validate_python({"profile": "docs", "calibration": p.id})
    resolved = resolve_filters(adopted, store)
    assert resolved.gopher_quality.max_non_alpha_words_ratio == thresholds["gopher_quality:alpha_words_ratio"]
    assert resolved.gopher_repetition.top_n_grams[0] == (2, thresholds["gopher_repetition:top_2_gram"])
    assert resolved.fineweb == cfg.fineweb  # rules without a proposal keep theirs
    # the cache key hashes the thresholds: same thresholds, same key, whatever the id
    assert filters_key(adopted, store) != filters_key(cfg, store)
    same = apply_thresholds(cfg, thresholds)
    assert filters_key(same, store) == filters_key(adopted, store)
    missing = TypeAdapter(FilterConfig).validate_python({"calibration": "0123abcd"})
    with pytest.raises(FileNotFoundError, match=r"'0123abcd'.*calibration/filters-0123abcd\.json"):
        resolve_filters(missing, store)
