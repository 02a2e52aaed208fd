"""The model half's texts of a language pack (pipelines/languages/<code>/chat.toml, math.toml,
qa.toml), read once per language, checked for the keys the generators need, and the one
line that says what a language without them leaves out.

    chat.toml  conversational turns                  pipelines.tasks.chitchat
    math.toml  word problems: training and held-out   pipelines.tasks.math_tasks
               wordings, worked solutions
    qa.toml    questions from the corpus' headings    pipelines.tasks.domain_qa

A language without one of them still trains: the stages leave that source out and say so
(`left_out`); asking a generator for it raises MissingText, which names the file to add.
"""

from __future__ import annotations

import functools
from typing import Any

from pipelines import languages

CHAT, MATH, QA = "chat.toml", "math.toml", "qa.toml"
OPS = ("add", "sub", "mul")
# the keys each file must have (tests/pipelines/test_language_packs.py checks every pack against them)
REQUIRED: dict[str, tuple[str, ...]] = {
    CHAT: ("intents",),
    MATH: ("instruction", "answer", "names", "objects", "containers", "question", "work", "templates", "heldout",
           "solutions"),
    QA: ("how", "about", "what", "question_open", "question_mark", "context_words", "context", "context_markers",
         "lowercase", "purpose", "infinitive", "headings", "answers", "harness", "example"),
}


class MissingText(ValueError):
    """A language pack lacks a file (or a key) of the model half; the message says which to add."""


def folder(language: str) -> str:
    return f"pipelines/languages/{language}/"


@functools.cache
def texts(language: str, file: str) -> dict[str, Any]:
    """The parsed `file` of `language`'s pack, checked for its required keys."""
    pack = languages.get(language)
    raw = pack.texts(file)
    if raw is None:
        raise MissingText(f"language {language} has no {file} ({languages.MODEL_FILES[file]}): "
                          f"add {folder(language)}{file} (see pipelines/languages/es/{file})")
    if missing := [k for k in REQUIRED[file] if k not in raw]:
        raise MissingText(f"{folder(language)}{file} lacks {', '.join(missing)} "
                          f"(see pipelines/languages/es/{file})")
    return raw


def has(language: str, file: str) -> bool:
    """Does `language`'s pack have `file`?"""
    return languages.get(language).texts(file) is not None


def left_out(language: str, files: tuple[str, ...] = (CHAT, MATH, QA)) -> str | None:
    """One line saying which of `files` the language lacks and what is left out for it, or
    None when it has them all."""
    missing = [f for f in files if not has(language, f)]
    if not missing:
        return None
    what = [languages.MODEL_FILES[f] for f in missing]
    said = what[0] if len(what) == 1 else f"{', '.join(what[:-1])} and {what[-1]}"
    return (f"language {language} has no {', '.join(missing)}: {said} are left out; add "
            f"{' '.join(folder(language) + f for f in missing)} (as pipelines/languages/es/ has them) to train on them")
