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
from pipelines.data.filters.rules import fails
from stages.config import ConfigError, nest, preset
from stages.data.filter_profile import (
    filters_key,
    load_proposal,
    measure,
    save_proposal,
)
from stages.settings import tree
from stages.store.outputs import DataStore
from tests.pipelines.data.filter_cases import FILTER_CASES, PARAGRAPHS, SPANISH, mixed_documents
from yunque.cli.calibrate import table


@pytest.mark.parametrize("profile", ["web", "docs"])
def test_evaluate_returns_what_apply_returns(profile: str) -> None:
    qf = QualityFilters(filter_profile(profile))
    texts = [SPANISH, *(c[1] for c in FILTER_CASES), *mixed_documents(seed=3, count=200)]
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
        "gopher_quality:alpha_words_ratio", "share of words with a letter", "below", 0.825)  # FineWeb-2's Spanish
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
    assert cfg.gopher_quality.max_non_alpha_words_ratio == web.gopher_quality.max_non_alpha_words_ratio == 0.825
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
    # without a reference: 0.8 alone drops 5 % of the corpus, more than the tail: loosened to it
    alone = {r.reason: r for r in propose(specs, corpus).rules}
    assert alone["gopher_quality:alpha_words_ratio"].reference_drop_proposed is None
    assert alone["gopher_quality:alpha_words_ratio"].corpus_drop_proposed == pytest.approx(0.02, abs=0.002)


def test_adopting_a_proposal(tmp_path) -> None:
    """The tree is built with the proposal's thresholds written into `filters` (once, with
    the home at hand), and the id beside them; the stages read the tree as it is."""
    store = DataStore(tmp_path)
    cfg = filter_profile("docs")
    p = propose(QualityFilters(cfg).rules(), {"gopher_quality:alpha_words_ratio": [0.9, 0.95, 0.6],
                                              "gopher_repetition:top_2_gram": [0.01, 0.02, 0.3]})
    thresholds = p.thresholds()
    path = save_proposal(store, p)
    assert path == tmp_path / "calibration" / f"filters-{p.id}.json"
    assert load_proposal(store, p.id).to_json() == p.to_json()
    adopted = tree(str(tmp_path), "tiny", {"filters.calibration": p.id}).filters
    assert adopted.calibration == p.id
    assert adopted.gopher_quality.max_non_alpha_words_ratio == thresholds["gopher_quality:alpha_words_ratio"]
    assert adopted.gopher_repetition.top_n_grams[0] == (2, thresholds["gopher_repetition:top_2_gram"])
    assert adopted.fineweb == cfg.fineweb  # rules without a proposal keep theirs
    # the cache key hashes the thresholds: same thresholds, same key, whatever the id
    assert filters_key(adopted) != filters_key(cfg)
    assert filters_key(apply_thresholds(cfg, thresholds)) == filters_key(adopted)
    # the same settings give the same tree object in a process: built (and validated) once
    assert tree(str(tmp_path), "tiny", {"filters": {"calibration": p.id}}).filters is adopted
    with pytest.raises(ConfigError, match=r"'0123abcd'.*calibration/filters-0123abcd\.json"):
        tree(str(tmp_path), "tiny", {"filters.calibration": "0123abcd"})
    with pytest.raises(ConfigError, match=r"filters.calibration.*lives in a home"):
        preset("tiny", {"filters.calibration": p.id})  # no home: the thresholds are nowhere


def test_a_changed_proposal_is_refused(tmp_path) -> None:
    """A proposal is named by its thresholds: a file whose thresholds no longer hash to its
    name was changed, and no run takes thresholds from it."""
    store = DataStore(tmp_path)
    p = propose(QualityFilters(filter_profile("docs")).rules(), {"gopher_quality:alpha_words_ratio": [0.9, 0.95, 0.6]})
    path = save_proposal(store, p)
    path.write_text(path.read_text().replace(f'"proposed": {p.thresholds()["gopher_quality:alpha_words_ratio"]}',
                                             '"proposed": 0.01', 1))
    with pytest.raises(ValueError, match=f"not those of proposal '{p.id}'"):
        load_proposal(store, p.id)
    with pytest.raises(ConfigError, match="was changed"):
        tree(str(tmp_path), "smoke", {"filters.calibration": p.id})


# Twenty rules with a config field each (fractions): 18 drop above, 2 below.
_TWENTY = [*(f"gopher_repetition:top_{n}_gram" for n in (2, 3, 4)),
           *(f"gopher_repetition:dup_{n}_gram" for n in range(5, 11)),
           *(f"gopher_repetition:{k}" for k in ("dup_para_frac", "dup_para_char_frac", "dup_line_frac",
                                                 "dup_line_char_frac")),
           "gopher_quality:bullet_lines_ratio", "gopher_quality:ellipsis_lines_ratio",
           "fineweb:short_line_ratio", "fineweb:char_dup_ratio", "fineweb:new_line_ratio",
           "gopher_quality:alpha_words_ratio", "fineweb:line_punct_ratio"]
_BELOW = {"gopher_quality:alpha_words_ratio", "fineweb:line_punct_ratio"}


def _union_drop(specs: list[RuleSpec], thresholds: dict, table: dict) -> float:
    """Share of documents at least one rule drops, document by document (`fails`)."""
    n = len(next(iter(table.values())))
    return sum(any(fails(s.drop_if, thresholds[s.reason], float(table[s.reason][i])) for s in specs)
               for i in range(n)) / n


def _twenty(rng: np.random.Generator, n: int, junk: list[float], cur: float, junk_range=(0.55, 0.9)):
    """Per rule, a bulk in [0, 0.3] and a share `junk[i]` of random documents in
    `junk_range` (mirrored, 1 - x, for below-rules); current threshold `cur` (mirrored)."""
    specs, corpus = [], {}
    for reason, share in zip(_TWENTY, junk):
        v = rng.uniform(0, 0.3, n)
        bad = rng.random(n) < share
        v[bad] = rng.uniform(*junk_range, bad.sum())
        below = reason in _BELOW
        corpus[reason] = 1 - v if below else v
        specs.append(_spec(reason, "below" if below else "above", round(1 - cur, 4) if below else cur))
    return specs, corpus


def _tighter(r) -> bool:
    return r.proposed > r.current if r.drop_if == "below" else r.proposed < r.current


def test_without_reference_nothing_is_tightened_and_the_total_drop_does_not_grow() -> None:
    """(a) The bug: a 2 % cut per rule compounded over 20 rules. Without a reference no rule
    tightens; the ones whose threshold alone drops more than the tail loosen to it."""
    rng = np.random.default_rng(1)
    junk = list(rng.uniform(0, 0.06, 20))
    specs, corpus = _twenty(rng, 3000, junk, cur=0.5)
    p = propose(specs, corpus, tail=0.02)
    by = {r.reason: r for r in p.rules}
    assert not [r.reason for r in p.rules if _tighter(r)]
    assert p.corpus_drop_current == pytest.approx(_union_drop(specs, {s.reason: s.threshold for s in specs}, corpus))
    assert p.corpus_drop_proposed == pytest.approx(_union_drop(specs, p.thresholds(), corpus))
    assert p.corpus_drop_proposed <= p.corpus_drop_current
    assert p.corpus_drop_current > 0.3  # the rules overlap little: the union is what counts
    for r in p.rules:
        if r.corpus_drop_current > 0.02:
            assert r.corpus_drop_proposed <= 0.02 and r.proposed != r.current
        else:
            assert r.proposed == r.current
    assert any(r.corpus_drop_current <= 0.02 for r in by.values())  # both kinds occur
    loaded = Proposal.from_json(p.to_json())
    assert loaded.corpus_drop_proposed == p.corpus_drop_proposed and loaded.id == p.id


@pytest.mark.parametrize("with_reference", [False, True])
def test_a_rule_cutting_the_body_is_loosened_to_the_tail(with_reference: bool) -> None:
    """(b) Gopher's alphabetic-words share on Spanish docs: 0.8 drops 30 % of the corpus."""
    rng = np.random.default_rng(2)
    alpha = np.concatenate([rng.uniform(0.85, 1.0, 1400), rng.uniform(0.3, 0.8, 600)])
    spec = _spec("gopher_quality:alpha_words_ratio", "below", 0.8)
    ref = {spec.reason: rng.uniform(0.9, 1.0, 30)} if with_reference else None
    p = propose([spec], {spec.reason: alpha}, ref, tail=0.02)
    (r,) = p.rules
    assert r.corpus_drop_current == pytest.approx(0.3)
    assert r.proposed < 0.8 and 0.015 <= r.corpus_drop_proposed <= 0.02
    assert r.proposed == pytest.approx(np.quantile(alpha, 0.02), abs=0.01)
    assert p.corpus_drop_proposed == r.corpus_drop_proposed


def test_with_a_reference_the_total_drop_stays_within_the_budget() -> None:
    """(c) Tightening needs a reference and stops at the overall budget; a rule whose
    threshold drops reference documents is always loosened; every reference document kept."""
    rng = np.random.default_rng(3)
    n = 4000
    # above-rules: current 0.95 drops nothing, 1 % junk in (0.55, 0.9) that the reference supports cutting
    specs, corpus = _twenty(rng, n, [0.01] * 20, cur=0.95)
    reference = {s.reason: rng.uniform(0, 0.35, 60) for s in specs}
    for s in specs:
        if s.drop_if == "below":
            reference[s.reason] = 1 - reference[s.reason]
    # the alphabetic-words share: 0.5 drops 1 % of the corpus and reference documents down to 0.4
    alpha = "gopher_quality:alpha_words_ratio"
    specs = [s if s.reason != alpha else _spec(alpha, "below", 0.5) for s in specs]
    corpus[alpha] = np.where(rng.random(n) < 0.01, rng.uniform(0.2, 0.5, n), rng.uniform(0.6, 1, n))
    reference[alpha] = np.concatenate([[0.4], rng.uniform(0.6, 1, 59)])
    current = {s.reason: s.threshold for s in specs}
    for tail in (0.005, 0.05):
        p = propose(specs, corpus, reference, tail=tail, margin=0.05)
        by = {r.reason: r for r in p.rules}
        assert by[alpha].proposed <= 0.4 * 0.95 and by[alpha].reference_drop_current > 0
        # what the proposal drops without its tightenings: the loosened-or-kept thresholds
        kept = {r.reason: r.current if _tighter(r) else r.proposed for r in p.rules}
        needed = _union_drop(specs, kept, corpus)
        assert 0 < needed < tail or tail < needed
        assert p.corpus_drop_proposed == pytest.approx(_union_drop(specs, p.thresholds(), corpus))
        assert p.corpus_drop_proposed <= max(tail, needed) + 1e-12
        assert _union_drop(specs, p.thresholds(), reference) == 0  # every reference document kept
        assert p.corpus_drop_current == pytest.approx(_union_drop(specs, current, corpus))
        tightened = [r for r in p.rules if _tighter(r)]
        if tail == 0.05:  # about 1 % each: some fit in the budget, not all 19
            assert 2 <= len(tightened) < 19
            assert all(r.reference_drop_proposed == 0 for r in tightened)
        else:
            assert not tightened  # the loosened alphabetic rule alone fills the budget


def test_document_length_is_never_tightened() -> None:
    """(d) A corpus' 98th percentile of length is no quality bound: long manual pages stay."""
    rng = np.random.default_rng(4)
    words = np.maximum(np.exp(rng.normal(6, 1, 3000)).round(), 31)
    specs = [_spec("gopher_quality:min_doc_words", "below", 30), _spec("gopher_quality:max_doc_words", "above", 100_000)]
    corpus = {s.reason: words for s in specs}
    ref = {s.reason: rng.uniform(100, 500, 40).round() for s in specs}
    for reference in (None, ref):
        for tail in (0.02, 0.5):
            p = propose(specs, corpus, reference, tail=tail)
            assert p.thresholds() == {"gopher_quality:min_doc_words": 30, "gopher_quality:max_doc_words": 100_000}
            assert p.corpus_drop_proposed == 0


def test_shared_fields_and_old_proposals() -> None:
    """Hash and ellipsis ratios share a field: both get the looser proposal, as applied.
    A proposal saved before the overall figures loads with them unknown."""
    rng = np.random.default_rng(5)
    hashes = np.where(rng.random(1000) < 0.1, 0.5, 0.0)  # 0.1 drops ~10 %: loosened
    ellipses = rng.uniform(0, 0.05, 1000)
    specs = [_spec("gopher_quality:hash_word_ratio", "above", 0.1),
             _spec("gopher_quality:ellipsis_word_ratio", "above", 0.1)]
    p = propose(specs, {s.reason: v for s, v in zip(specs, (hashes, ellipses))})
    assert [r.proposed for r in p.rules] == [0.5, 0.5]
    old = p.to_json()
    del old["corpus_drop_current"], old["corpus_drop_proposed"]
    loaded = Proposal.from_json(old)
    assert loaded.corpus_drop_proposed is None and loaded.id == p.id
    assert "all rules" not in table(loaded) and "all rules" in table(p)
    assert f"{100 * (hashes > 0.1).mean():.1f}% -> 0.0%" in table(p).splitlines()[-1]


def test_metric_columns_are_aligned_per_document() -> None:
    class Uneven:  # a metric reported for some texts only
        def evaluate(self, text):
            return None, {"a": 1.0, **({"b": 2.0} if text == "y" else {})}

    columns = measure(Uneven(), ["x", "y", "z"])  # type: ignore[arg-type]
    assert columns["a"] == [1.0, 1.0, 1.0]
    assert math.isnan(columns["b"][0]) and columns["b"][1] == 2.0 and math.isnan(columns["b"][2])
    with pytest.raises(ValueError, match="differ in length"):
        propose([_spec("fineweb:char_dup_ratio", "above", 0.1), _spec("fineweb:new_line_ratio", "above", 0.3)],
                {"fineweb:char_dup_ratio": [0.0, 0.1], "fineweb:new_line_ratio": [0.0]})
