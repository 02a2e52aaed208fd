"""`--language`: the one language setting of `yunque run`, `yunque ui` and `yunque fetch-sample`.

The code goes into the home's overrides as the tree's top-level `language` key
(stages.config), normalised ("fr_FR" -> "fr", said in one line). A home remembers it: a
later command that names no language keeps the home's. A new home whose command names
none takes the corpus' dominant language, detected on a sample of every shard, and says so.
"""

from __future__ import annotations

import argparse
from typing import Any

LANGUAGE_KEYS = ("language", "filters.language", "langid.language")


class LanguageError(ValueError):
    """A language that cannot be used; the message is one line."""


def add_argument(p: argparse.ArgumentParser, what: str) -> None:
    from pipelines import languages

    p.add_argument("--language", metavar="CODE",
                   help=f"{what} (ISO 639-1: {', '.join(languages.codes())}; fr_FR or FR are read as fr)")


def resolve(given: str) -> tuple[str, str | None]:
    """(the supported code, a note when it was written otherwise), or LanguageError."""
    from pipelines import languages

    try:
        return languages.resolve(given)
    except languages.UnknownLanguage as e:
        raise LanguageError(f"--language: {e}") from None


def named(overrides: dict[str, Any]) -> str | None:
    """The language an overrides dict names, in any of its forms (dotted or nested)."""
    from stages.config import nest

    nested = nest(overrides)
    if isinstance(nested.get("language"), str):
        return nested["language"]
    for section in ("filters", "langid"):
        value = nested.get(section, {}).get("language") if isinstance(nested.get(section), dict) else None
        if isinstance(value, str):
            return value
    return None


def with_language(overrides: dict[str, Any], flag: str | None, saved: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The overrides this command runs with: --language (normalised) as `language`, else
    the overrides' own, else the home's saved one. Returns (overrides, lines to print)."""
    lines: list[str] = []
    out = dict(overrides)
    if flag is not None:
        code, note = resolve(flag)
        if note:
            lines.append(note)
        theirs = named(out)
        if theirs is not None and resolve(theirs)[0] != code:
            raise LanguageError(f"--language {code} and the overrides' language {theirs!r} disagree: give one")
        out["language"] = code
    elif named(out) is None and (kept := named(saved)) is not None:
        out["language"] = resolve(kept)[0]
    return _normalised(out, lines), lines


def _normalised(overrides: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    """Every language key of the overrides as its supported code (the home keeps "fr", not
    "fr_FR": the launchpad offers the codes as a choice), a line for each one rewritten. The
    overrides keep their form (dotted or nested): a home's settings that only change form
    would read as changed."""
    out = dict(overrides)
    places: list[tuple[dict[str, Any], str, str]] = [(out, k, k) for k in LANGUAGE_KEYS if k in out]
    for section in ("filters", "langid"):
        if isinstance(out.get(section), dict) and "language" in out[section]:
            out[section] = dict(out[section])
            places.append((out[section], "language", f"{section}.language"))
    for node, key, name in places:
        if isinstance(node[key], str):
            code, note = resolve(node[key])
            if note:
                lines.append(note if name == "language" else f"{name.rsplit('.', 1)[0]}.{note}")
            node[key] = code
    return out


def sample_folder(language: str) -> str:
    """The folder under the home that holds a language's sample corpus ("sample" for Spanish,
    the first sample, so that homes made before there were others keep theirs)."""
    return "sample" if language == "es" else f"sample-{language}"
