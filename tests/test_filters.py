"""Quality filters: one document per rule that triggers exactly that rule, a realistic
Spanish document that passes everything, config thresholds and switches, and the fast
n-gram index against a plain reference implementation."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from pydantic import TypeAdapter

from pipelines import languages
from pipelines.config import FilterConfig, profile_fields
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
from stages.config import nest

SPANISH = """La biblioteca municipal y el software libre

Introducción

Hace tres años, la biblioteca municipal de nuestro pueblo decidió sustituir los viejos \
ordenadores de la sala de lectura por equipos con Debian. La decisión no fue sencilla: \
muchos usuarios estaban acostumbrados a otro sistema y temían perder sus documentos.

El equipo técnico preparó un plan en varias fases. Primero se instaló el sistema en dos \
puestos de prueba, donde los voluntarios comprobaron que el procesador de textos, el \
navegador y la impresora funcionaban sin problemas. Después se organizaron talleres \
semanales para explicar a los lectores cómo guardar sus archivos en una memoria externa.

Resultados

Hoy todos los puestos públicos usan software libre. Las actualizaciones de seguridad llegan \
cada semana y se aplican durante la noche, sin interrumpir el trabajo de nadie. El \
presupuesto que antes se destinaba a licencias se invierte ahora en libros, cursos de \
alfabetización digital y una pequeña colección de novelas gráficas.

Los bibliotecarios reconocen que todavía quedan retos. Algunos formularios de la \
administración solo se abren correctamente con programas privativos, y ciertos juegos \
educativos no tienen versión para Linux. Aun así, la experiencia ha sido tan positiva que \
otras dos bibliotecas de la comarca ya han pedido ayuda para seguir el mismo camino.
"""

PARAGRAPHS = [p.strip() for p in SPANISH.split("\n\n") if len(p) > 100]
# 45 words of ordinary prose: too short for Gopher, long enough for the repetition rules.
SHORT = (
    "El servidor de correo de la oficina central se reinicia cada domingo por la mañana, "
    "cuando casi nadie trabaja. Antes de hacerlo, el administrador revisa los registros, "
    "comprueba el espacio libre en el disco y avisa a los usuarios por si alguno necesita "
    "enviar un mensaje urgente."
)


SHORT_LINES = [
    "El disco duro está lleno.", "La impresora no responde.", "Reinicia el router de casa.",
    "Guarda una copia hoy mismo.", "Cambia tu contraseña pronto.", "Actualiza los paquetes ya.",
    "Revisa los cables sueltos.", "Apaga la pantalla al salir.", "Instala un antivirus libre.",
    "Borra los archivos viejos.", "Comprueba la conexión wifi.", "Limpia el teclado con cuidado.",
    "Cierra las ventanas abiertas.", "Anota cada error que veas.", "Pregunta al técnico mañana.",
    "Usa cables de buena calidad.", "Protege tu cuenta con clave.", "Comparte la red con vecinos.",
]  # fmt: skip


def unique_words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def filler(n_chars: int) -> str:
    """`n_chars` characters of distinct words (the last one cut short, still distinct)."""
    return " ".join(unique_words("relleno", n_chars // 11 + 1))[:n_chars].strip()


def fill_until(build, ratio_of, target: float) -> str:
    """The shortest build(filler(k)) with ratio_of(text) <= target: one character of filler
    at a time, so the ratio lands just under the target."""
    k = 0
    while ratio_of(text := build(filler(k))) > target:
        k += 1
    return text


def top_ngram_doc(phrase: str, n: int, threshold: float) -> str:
    """`phrase` (n words) many times between unique fillers: its n-gram is the most frequent,
    just above `threshold`, while its shorter prefixes stay below theirs."""
    reps = 12
    length = len(phrase)

    def build(fill_text: str) -> str:
        fill = fill_text.split()
        chunk = len(fill) // reps
        parts = [f"{phrase} {' '.join(fill[i * chunk : (i + 1) * chunk])}" for i in range(reps)]
        return " ".join(parts) + " " + " ".join(fill[reps * chunk :])

    text = fill_until(build, lambda t: length * reps / len(t), threshold + 0.01)
    assert length * reps / len(text) > threshold
    return text


def dup_ngram_doc(n: int, threshold: float) -> str:
    """A run of exactly n distinct words, twice, inside unique fillers: only n-grams up to
    length n repeat, and the repeated characters are just above the threshold for n. The
    run's last word is long, so its repeated 2-, 3- and 4-grams stay below the top-n rules."""
    run = unique_words("frase", n)
    run[-1] = "extraordinariamente" * 2 + run[-1]
    chars = sum(map(len, run))

    def build(fill_text: str) -> str:
        fill = fill_text.split()
        half = len(fill) // 2
        return " ".join(["inicio", *run, *fill[:half], *run, *fill[half:], "final"])

    text = fill_until(build, lambda t: chars / len(t), threshold + 0.005)
    assert chars / len(text) > threshold
    return text


def new_line_doc() -> str:
    """Lines of three ~10-character tokens (not short), every eighth ending in a full stop:
    more than 0.3 newlines per token."""
    lines = []
    words = iter(unique_words("archivo", 200))
    for i in range(40):
        line = " ".join(next(words) for _ in range(3))
        lines.append(line + ("." if i % 8 == 0 else ""))
    lines[1] = "archivo900 de la"  # two stop words for Gopher
    return "\n".join(lines)


def word_salad(text: str, seed: int = 5) -> str:
    """`text`'s words shuffled, in lines of twelve: every word and its frequency kept."""
    words = text.split()
    random.Random(seed).shuffle(words)
    return "\n".join(" ".join(words[i:i + 12]) + "." for i in range(0, len(words), 12))


_ONLY_INTEGRITY = {"gopher_repetition.enabled": False, "gopher_quality.enabled": False,
                   "c4.enabled": False, "fineweb.enabled": False, "integrity.enabled": True}

FILTER_CASES: list[tuple[str, str, dict]] = [
    ("gopher_repetition:empty", "", {}),
    ("gopher_repetition:dup_para_frac",
     "\n\n".join([PARAGRAPHS[0], PARAGRAPHS[1], PARAGRAPHS[0], PARAGRAPHS[0]]), {}),
    ("gopher_repetition:dup_para_char_frac",
     "\n\n".join([PARAGRAPHS[1], "Primera nota breve.", "Segunda nota breve.", PARAGRAPHS[1]]), {}),
    ("gopher_repetition:dup_line_frac",
     "\n".join([*PARAGRAPHS, *["Véase también."] * 5]), {}),
    ("gopher_repetition:dup_line_char_frac",
     "\n".join([PARAGRAPHS[1], PARAGRAPHS[0], PARAGRAPHS[2], PARAGRAPHS[1]]), {}),
    ("gopher_repetition:top_2_gram", "Hola mundo cruel.", {}),
    ("gopher_repetition:top_3_gram", top_ngram_doc("de la administración", 3, 0.18), {}),
    ("gopher_repetition:top_4_gram", top_ngram_doc("y a la administración", 4, 0.16), {}),
    *[(f"gopher_repetition:dup_{n}_gram", dup_ngram_doc(n, t), {})
      for n, t in [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]],
    ("gopher_quality:min_doc_words", SHORT, {}),
    ("gopher_quality:max_doc_words", " ".join(f"palabra{i}" for i in range(100_001)), {}),
    ("gopher_quality:min_avg_word_length",
     " ".join(a + b for a in "bcdfglmnpr" for b in "aeiou") + " y la de",
     {}),
    ("gopher_quality:max_avg_word_length",
     " ".join(f"electroencefalografía{i}" for i in range(60)) + " de la", {}),
    ("gopher_quality:hash_word_ratio",
     SHORT + " " + PARAGRAPHS[0] + " " + " ".join(f"#etiqueta{i}" for i in range(15)), {}),
    ("gopher_quality:ellipsis_word_ratio",
     " ".join(f"{w}..." for w in (SHORT + " " + PARAGRAPHS[0]).split()[:40])
     + " " + PARAGRAPHS[1], {}),
    ("gopher_quality:bullet_lines_ratio",
     "\n".join(f"- {s.strip()}." for s in (PARAGRAPHS[1] + " " + PARAGRAPHS[2]).split(".")
               if s.strip()), {}),
    ("gopher_quality:ellipsis_lines_ratio",
     "\n".join(s.strip() + "..." if i % 2 else s.strip() + "."
               for i, s in enumerate((PARAGRAPHS[0] + " " + PARAGRAPHS[2]).split("."))
               if s.strip()), {}),
    ("gopher_quality:alpha_words_ratio",
     PARAGRAPHS[0] + " " + " ".join(str(1000 + 7 * i) for i in range(40)), {}),
    ("gopher_quality:min_stop_words", " ".join(f"servidor{i}" for i in range(60)) + ".", {}),
    ("c4:lorem_ipsum",
     SPANISH + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.\n", {}),
    ("c4:curly_bracket",
     SPANISH + "\nEl bloque de la función main() { return 0; } termina aquí.\n", {}),
    ("c4:too_few_sentences",
     (PARAGRAPHS[1] + " " + PARAGRAPHS[2]).replace(". ", ", y "), {}),
    ("fineweb:empty", " \n\t\n", {"gopher_repetition.enabled": False,
                                  "gopher_quality.enabled": False, "c4.enabled": False}),
    ("fineweb:line_punct_ratio",
     "\n".join(s.strip() for s in (PARAGRAPHS[1] + " " + PARAGRAPHS[3]).split(".") if s.strip()),
     {}),
    ("fineweb:short_line_ratio", "\n".join(SHORT_LINES), {}),
    ("fineweb:char_dup_ratio", SPANISH + "\nLa biblioteca municipal y el software libre\n", {}),
    ("fineweb:new_line_ratio", new_line_doc(), {}),
    # ours, after every published rule (on in the docs profile, off in web)
    ("integrity:stop_word_share", " ".join(f"servidor{i}" for i in range(60)) + ".", _ONLY_INTEGRITY),
    ("integrity:foreign_script_share",
     SPANISH.replace("ó", "Ñі").replace("í", "Г­").replace("á", "а"), _ONLY_INTEGRITY),
    ("integrity:determiner_order", word_salad(SPANISH), _ONLY_INTEGRITY),
]  # fmt: skip


def web() -> FilterConfig:
    """The published rules as FineWeb set them for English, with Spanish stop words: the
    cases below are built on them (FineWeb-2's Spanish thresholds: tests/test_languages.py)."""
    return make_cfg({})


def make_cfg(overrides: dict, profile: str = "web") -> FilterConfig:
    """A profile's filters with dotted field overrides (explicit fields win), FineWeb's
    English thresholds standing where FineWeb-2's Spanish config sets its own."""
    english = FilterConfig(profile="web", language="en")
    profile_set = profile_fields(profile, "en")
    base: dict = {"profile": profile}
    for section, fields in languages.get("es").filters.items():
        defaults = dataclasses.asdict(getattr(english, section))
        base[section] = {k: defaults[k] for k in fields if k not in profile_set[section]}
    tree = nest({**base, **overrides})
    for section in languages.get("es").filters:  # nest replaced a section its overrides name
        tree[section] = {**base[section], **tree.get(section, {})}
    return TypeAdapter(FilterConfig).validate_python(tree)


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
