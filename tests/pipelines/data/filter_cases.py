"""The documents the quality filters are tried on: a realistic Spanish page that passes
every rule, one case per rule that triggers exactly that rule (FILTER_CASES), random
documents stitched from them, and the filter configurations the cases are built on. For
the filters' tests, their parity with datatrove and the calibration."""

from __future__ import annotations

import dataclasses
import random

from pydantic import TypeAdapter

from pipelines import languages
from pipelines.config import FilterConfig, profile_fields
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
    cases below are built on them (FineWeb-2's Spanish thresholds: tests/pipelines/test_languages.py)."""
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


def mixed_documents(seed: int, count: int) -> list[str]:
    """Documents stitched from the lines of SPANISH, SHORT_LINES and the cases, with the characters the rules look for
    ("[1]", "{", "…", "#", "•" ...) and every kind of line break sprinkled in."""
    rng = random.Random(seed)
    lines = [ln for text in [SPANISH, *SHORT_LINES, *(c[1] for c in FILTER_CASES[:25])]
             for ln in text.split("\n") if ln.strip() and len(ln) < 2000]  # fmt: skip
    pieces = ["[1]", "[edit]", "{", "javascript", "lorem ipsum", "…", "...", "#", "•", "- ",
              "uses cookies", "x" * 1001, "_", "\u00a0", "。"]  # fmt: skip
    breaks = ["\n", "\n\n", "\r\n", "\n\n\n", "\x0c", "\u2028", " \n ", "\n  \n", "\r"]
    docs = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 30)):
            words = rng.choice(lines).split(" ")
            if rng.random() < 0.3:
                words.insert(rng.randint(0, len(words)), rng.choice(pieces))
            parts.append(parts[-1] if parts and rng.random() < 0.1 else " ".join(words))
        docs.append("".join(p + rng.choice(breaks) for p in parts))
    return docs
