"""Quality filters: one document per rule that triggers exactly that rule, a realistic
Spanish document that passes everything, config thresholds and switches, and the fast
n-gram index against a plain reference implementation."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pipelines.config import FilterConfig
from pipelines.data.filters import (
    REASONS,
    FilterOutcome,
    QualityFilters,
    TextView,
    reasons,
    tokenize,
)
from pipelines.data.filters.fineweb import FineWeb
from pipelines.data.filters.gopher_repetition import NgramIndex
from pipelines.data.filters.text import count_sentences, sentence_spans
from pipelines.languages import stop_words
from tests.pipelines.data.filter_cases import (
    FILTER_CASES,
    PARAGRAPHS,
    SHORT,
    SPANISH,
    make_cfg,
    web,
)


@pytest.fixture(scope="module")
def qf() -> QualityFilters:
    return QualityFilters(web())


def test_realistic_spanish_document_passes(qf: QualityFilters) -> None:
    out = qf.apply(SPANISH)
    assert out == FilterOutcome(True, None, out.text)
    # C4 removed the one-word headings and rejoined the kept lines.
    lines = out.text.split("\n")
    assert "Introducción" not in lines and "Resultados" not in lines
    assert lines[0] == "La biblioteca municipal y el software libre"
    assert len(lines) == 5


@pytest.mark.parametrize("reason,text,overrides", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_each_rule_triggers(reason: str, text: str, overrides: dict, qf: QualityFilters) -> None:
    filters = QualityFilters(make_cfg(overrides)) if overrides else qf
    out = filters.apply(text)
    assert (out.keep, out.reason) == (False, reason)
    assert out.text == text  # a dropped document keeps its input text


def test_cases_cover_every_reason() -> None:
    assert {c[0] for c in FILTER_CASES} == set(REASONS)
    assert len(set(REASONS)) == len(REASONS)
    assert all(r.split(":")[0] in {"gopher_repetition", "gopher_quality", "c4", "fineweb", "integrity"}
               for r in REASONS)  # fmt: skip
    assert reasons(web()) == REASONS


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("gopher_repetition.top_n_grams", [[2, 0.001]], "gopher_repetition:top_2_gram"),
        ("gopher_quality.min_doc_words", 500, "gopher_quality:min_doc_words"),
        ("c4.min_num_sentences", 50, "c4:too_few_sentences"),
        ("fineweb.line_punct_thr", 1.0, "fineweb:line_punct_ratio"),
        ("fineweb.short_line_length", 1000, "fineweb:short_line_ratio"),
    ],
)
def test_stricter_threshold_drops_the_good_document(key: str, value: object, reason: str) -> None:
    assert QualityFilters(make_cfg({key: value})).apply(SPANISH).reason == reason


def test_looser_threshold_lets_a_document_through() -> None:
    # 45 words pass min_doc_words=40 and go on to C4, which finds only two sentences.
    out = QualityFilters(make_cfg({"gopher_quality.min_doc_words": 40})).apply(SHORT)
    assert out.reason == "c4:too_few_sentences"
    dup = dict(CASES_BY_REASON)["fineweb:char_dup_ratio"]
    assert QualityFilters(make_cfg({"fineweb.char_duplicates_ratio": 0.5})).apply(dup).keep


def test_zero_is_a_threshold_not_off() -> None:
    # datatrove treats a falsy threshold as "rule off"; here only None is.
    repeated = SPANISH + "\n" + PARAGRAPHS[0][:80]
    out = QualityFilters(make_cfg({"gopher_repetition.dup_n_grams": [[5, 0.0]]})).apply(repeated)
    assert out.reason == "gopher_repetition:dup_5_gram"


CASES_BY_REASON = [(c[0], c[1]) for c in FILTER_CASES]


def test_none_disables_a_rule() -> None:
    text = dict(CASES_BY_REASON)["gopher_quality:min_stop_words"]
    out = QualityFilters(make_cfg({"gopher_quality.min_stop_words": None})).apply(text)
    assert out.reason == "c4:too_few_sentences"  # Gopher let it through to C4


@pytest.mark.parametrize(
    "name,reason",
    [
        ("gopher_repetition", "gopher_repetition:top_2_gram"),
        ("gopher_quality", "gopher_quality:min_stop_words"),
        ("c4", "c4:lorem_ipsum"),
        ("fineweb", "fineweb:line_punct_ratio"),
    ],
)
def test_disabled_filter_is_skipped(name: str, reason: str) -> None:
    text = dict(CASES_BY_REASON)[reason]
    assert QualityFilters(web()).apply(text).reason == reason
    out = QualityFilters(make_cfg({f"{name}.enabled": False})).apply(text)
    assert out.reason is None or not out.reason.startswith(name + ":")


def test_all_disabled_keeps_text_unchanged() -> None:
    off = {f"{n}.enabled": False for n in ("gopher_repetition", "gopher_quality", "c4", "fineweb")}
    assert QualityFilters(make_cfg(off)).apply("x").__dict__ == {
        "keep": True,
        "reason": None,
        "text": "x",
    }


def test_c4_removes_lines(qf: QualityFilters) -> None:
    extra = [
        "Para ver el mapa active JavaScript en su navegador, por favor.",
        "Este sitio uses cookies y acepta nuestra privacy policy al continuar.",
        "Un enlace roto " + "x" * 1001 + " aparece aquí.",
    ]
    text = SPANISH.replace("Resultados", "\n".join(extra)).replace(
        "gráficas.", "gráficas.[1] Fin de la cita[edit]."
    )
    out = qf.apply(text)
    assert out.keep, out.reason
    assert not any(e.split()[0] in out.text for e in extra)
    assert "gráficas. Fin de la cita." in out.text and "[1]" not in out.text


def test_apply_many_matches_apply(qf: QualityFilters) -> None:
    texts = [SPANISH] + [c[1] for c in FILTER_CASES[:8]]
    assert qf.apply_many(texts) == [qf.apply(t) for t in texts]


def test_tokenizer() -> None:
    assert tokenize("¿Qué es «Debian»? Es un sistema, p. ej. GNU/Linux... ¡Sí!") == [
        "¿", "Qué", "es", "«", "Debian", "»?", "Es", "un", "sistema", ",", "p", ".", "ej", ".",
        "GNU", "/", "Linux", "...", "¡", "Sí", "!",
    ]  # fmt: skip
    assert tokenize("año 2024_b\u00a0niño\n") == ["año", "2024_b", "niño"]


def test_sentences() -> None:
    text = "  Primera frase. ¿Segunda? «Tercera.» Cuarta...  fin  "
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == [
        "Primera frase.",
        "¿Segunda?",
        "«Tercera.»",
        "Cuarta...",
        "fin",
    ]
    assert count_sentences(text) == len(spans) == 5
    assert count_sentences("   ") == 0 and sentence_spans("") == []
    assert count_sentences("versión 2.6.32 de www.debian.org") == 1


def test_text_view_splits() -> None:
    view = TextView("\nuno\r\ndos\n\n\ntres  \n")
    assert view.lines == ["", "uno", "dos", "", "", "tres  "]
    assert view.line_runs == ["", "uno\r", "dos", "tres  ", ""]
    assert view.paragraphs == ["uno\r\ndos", "tres"]
    assert view.nonblank_lines == ["uno\r", "dos", "tres  "]
    assert view.words == ["uno", "dos", "tres"] and view.n_words == 3


def test_gopher_words_are_whitespace_separated() -> None:
    """Gopher's rules count words as the paper does (whitespace-separated): "Capítulo 17.
    Filtros" is 4 tokens of which 2 have a letter, but 3 words of which 2 do; "(véase"
    and "/usr/bin" are words with letters. A symbol between spaces is a word too."""
    from pipelines.data.filters.gopher_quality import GopherQuality

    gq = GopherQuality(web().gopher_quality, stop_words("es"))
    _, _, m = gq.evaluate(TextView("Capítulo 17. Filtros"))
    assert m["gopher_quality:alpha_words_ratio"] == 2 / 3
    assert m["gopher_quality:min_doc_words"] == 3
    assert m["gopher_quality:min_avg_word_length"] == (8 + 3 + 7) / 3
    _, _, m = gq.evaluate(TextView("Ver (véase /usr/bin y «De la» 2.6, 7 … #"))
    assert m["gopher_quality:alpha_words_ratio"] == 6 / 10
    assert m["gopher_quality:hash_word_ratio"] == 1 / 10
    assert m["gopher_quality:ellipsis_word_ratio"] == 1 / 10
    assert m["gopher_quality:min_stop_words"] == 3  # y, de, la: lowercased, « » split off
    words = SHORT.split()
    text = " ".join(words[:47] + ["¿", "¡", "▸"])
    assert gq.filter(TextView(text)) == (True, None)  # 50 words
    assert gq.filter(TextView(" ".join(words[:49]))) == (False, "gopher_quality:min_doc_words")


def test_fineweb_directly() -> None:
    fw = FineWeb(web().fineweb)
    assert fw.filter(TextView("   ")) == (False, "fineweb:empty")
    assert fw.filter(TextView(PARAGRAPHS[0])) == (True, None)


SPANISH_MOST_FREQUENT = (
    "de", "la", "que", "el", "en", "y", "a", "los", "se", "del", "las", "un", "por", "con",
    "no", "una", "su", "para", "es", "al", "lo", "como", "más",
)  # fmt: skip


def test_stop_words() -> None:
    es = stop_words("es")
    assert es.issuperset(SPANISH_MOST_FREQUENT)
    assert stop_words("es_ES") is es and stop_words("ES-mx") is es
    for lang in ("en", "fr", "de", "pt", "it"):
        assert len(stop_words(lang)) >= 8
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        stop_words("xx")


# Reference implementations of the n-gram measures, written the obvious way.
def _ref_top(words: list[str], n: int) -> int:
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0
    gram, count = Counter(grams).most_common(1)[0]
    return len(" ".join(gram)) * count


def _ref_dup(words: list[str], n: int) -> int:
    seen, repeated, i = set(), 0, 0
    while i < len(words) - n + 1:
        gram = tuple(words[i : i + n])
        if gram in seen:
            repeated += sum(map(len, gram))
            i += n
        else:
            seen.add(gram)
            i += 1
    return repeated


def test_ngram_index_matches_reference() -> None:
    rng = random.Random(7)
    vocab = ["a", "de", "la", "casa", "roja", "el", "perro", "corre", "."]
    for trial in range(300):
        size = rng.choice([0, 1, 2, 5, 12, 40, 200])
        k = rng.randint(1, len(vocab))
        words = [rng.choice(vocab[:k]) for _ in range(size)]
        if trial % 3 == 0 and size:  # planted repeated runs
            run = words[: rng.randint(1, min(size, 15))]
            words = words + run + words[: size // 2] + run
        index = NgramIndex(words)
        for n in range(1, 12):
            assert index.top_chars(n) == _ref_top(words, n), (words, n)
            assert index.duplicate_chars(n) == _ref_dup(words, n), (words, n)


def test_integrity_is_on_for_docs_and_off_for_web() -> None:
    assert FilterConfig().integrity.enabled and not web().integrity.enabled
    gibberish = " ".join(f"servidor{i}" for i in range(60)) + "."
    docs = QualityFilters(FilterConfig(profile="docs", c4={"min_num_sentences": 0}))
    assert docs.evaluate(gibberish)[1]["integrity:stop_word_share"] == 0.0
    assert docs.evaluate(SPANISH)[1]["integrity:foreign_script_share"] == 0.0
