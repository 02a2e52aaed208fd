"""The languages Yunque supports: one pack of texts per language, and the one place that
turns what a user typed ("fr_FR", "FR", "fra", "French") into a supported ISO 639-1 code.

A pack is a folder `pipelines/languages/<code>/` of TOML files: `language.toml` makes a
language supported (its names and codes, stop words, elisions, FineWeb-2's thresholds,
C4's phrases); `chat.toml`, `math.toml` and `qa.toml` feed the model half where present
(`missing()` says what is absent). Adding a language is adding its folder, and no code
elsewhere changes (docs/languages.md#adding-a-language). Nothing here imports torch or Dagster.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PACKS = Path(__file__).parent
PACK_FILE = "language.toml"
# The model half's files: what each gives a model in that language
MODEL_FILES = {
    "chat.toml": "conversational turns",
    "math.toml": "math word problems",
    "qa.toml": "questions from the corpus' headings",
}
APOSTROPHES = "'’"


class UnknownLanguage(ValueError):
    """A language code no pack answers to; the message lists the supported codes."""


@dataclass(frozen=True)
class Language:
    code: str  # ISO 639-1
    name: str  # in English
    native: str  # in the language itself
    aliases: tuple[str, ...]  # other codes that mean it (ISO 639-2/3)
    script: str  # "Latin", "Cyrillic", ...
    stop_words: frozenset[str]  # lowercase; the elided forms included (the integrity rule's)
    # Gopher's "at least 2 stop words" rule: FineWeb-2's published list where it has one
    gopher_stop_words: frozenset[str]
    # function words written elided before a vowel: "l" of "l'homme", "qu" of "qu'il"
    elisions: frozenset[str]
    # FineWeb-2's published thresholds for this language: {section: {field: value}}
    filters: dict[str, dict[str, Any]]
    filter_source: str  # where those thresholds were published
    policy_phrases: tuple[str, ...]  # C4's cookie / terms-of-use rule, in this language
    # the integrity rule's word order: determiners, and the prepositions and conjunctions
    # that do not follow one (empty: the rule is off for the language)
    determiners: frozenset[str]
    function_words: frozenset[str]
    folder: Path

    def describe(self) -> str:
        return f"{self.code} ({self.name}, {self.native})"

    def texts(self, file: str) -> dict[str, Any] | None:
        """One of the model half's files (`chat.toml`, ...), or None when the pack has none."""
        return _read(self.folder / file) if (self.folder / file).is_file() else None

    def missing(self) -> list[str]:
        """What the model half lacks in this language, in words (empty: nothing)."""
        return [what for file, what in MODEL_FILES.items() if not (self.folder / file).is_file()]


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None


def codes() -> tuple[str, ...]:
    """Every supported language, by its ISO 639-1 code."""
    return tuple(sorted(p.name for p in PACKS.iterdir() if (p / PACK_FILE).is_file()))


@cache
def get(code: str) -> Language:
    """The pack of a supported code (as `resolve` returns it)."""
    folder = PACKS / code
    if not (folder / PACK_FILE).is_file():
        raise UnknownLanguage(_unknown(code))
    raw = _read(folder / PACK_FILE)
    elisions = frozenset(w.lower() for w in raw.get("elisions", ()))
    words = frozenset(raw["stop_words"].split()) | elisions
    # FineWeb-2 writes spaCy's elided tokens ("l'"); our tokenizer splits "l'homme" into "l" "'" "homme"
    gopher = frozenset(w.rstrip(APOSTROPHES).lower() for w in raw.get("gopher_stop_words", "").split()) or words
    return Language(
        code=code,
        name=raw["name"],
        native=raw["native"],
        aliases=tuple(raw.get("aliases", ())),
        script=raw.get("script", "Latin"),
        stop_words=words,
        gopher_stop_words=gopher,
        elisions=elisions,
        filters={section: dict(values) for section, values in raw.get("filters", {}).items()},
        filter_source=raw.get("filter_source", ""),
        policy_phrases=tuple(p.lower() for p in raw.get("policy_phrases", ())),
        determiners=frozenset(raw.get("determiners", "").split()),
        function_words=frozenset(raw.get("function_words", "").split()),
        folder=folder,
    )


def resolve(given: str) -> tuple[str, str | None]:
    """(the supported code `given` means, a one-line note when it was written otherwise).

    "fr", "FR", "fr_FR", "fr-FR", "fra", "fre" and "French" all mean "fr"; anything else
    is an UnknownLanguage with a did-you-mean and the supported codes."""
    if not isinstance(given, str) or not given.strip():
        raise UnknownLanguage(_unknown(str(given)))
    text = given.strip()
    base = text.lower().replace("-", "_").split("_")[0]
    for code in codes():
        pack = get(code)
        if base == code or base in pack.aliases or text.lower() in (pack.name.lower(), pack.native.lower()):
            note = None if text == code else f"language {given!r} is read as {code!r} ({pack.name})"
            return code, note
    raise UnknownLanguage(_unknown(text))


def normalise(given: str) -> str:
    """`resolve`'s code alone (for validators)."""
    return resolve(given)[0]


def _unknown(given: str) -> str:
    names = {c: c for c in codes()}
    for c in codes():
        pack = get(c)
        names.update({a: c for a in pack.aliases})
        names.update({pack.name.lower(): c, pack.native.lower(): c})
    close = dict.fromkeys(names[m] for m in difflib.get_close_matches(given.lower(), list(names), n=3, cutoff=0.6))
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return f"unknown language {given!r}{hint}; supported: {', '.join(codes())} (ISO 639-1 codes)"


def stop_words(language: str) -> frozenset[str]:
    """The stop words of a language (any spelling `resolve` accepts)."""
    return get(normalise(language)).stop_words


def elided(word: str, elisions: frozenset[str]) -> bool:
    """Is `word` (lowercase, punctuation stripped) a function word elided onto the next:
    "l'homme", "d’un", "qu'il"? Those count as stop words, as the tokenizer-based rules count
    their "l" / "d" / "qu"."""
    for mark in APOSTROPHES:
        head, sep, _ = word.partition(mark)
        if sep and head in elisions:
            return True
    return False
