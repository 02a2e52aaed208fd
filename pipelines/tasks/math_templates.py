"""The wordings of the arithmetic word problems in a language: the ones post-training sees,
and the ones kept for evaluation only, read from the language pack's `math.toml`
(pipelines/languages/<code>/math.toml, which documents the placeholders).

A model that learned one template has not learned the task, so training draws from many
wordings and evaluation has its own that no training problem uses (`heldout`); with the
held-out operand pairs, a problem of the "rephrased" sets is new to the model twice over.
Why: docs/evaluation.md#math-tasks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pipelines.tasks import packs

PLACEHOLDERS = frozenset({"a", "b", "n1", "n2", "o", "q", "c_sg", "c_pl"})  # what a problem template may use


@dataclass(frozen=True)
class Wordings:
    language: str
    instruction: str  # appended to every problem: reason in <think>, answer in <answer>
    answer: str  # the closing sentence of a worked solution, {c} the result
    names: tuple[str, ...]
    objects: tuple[tuple[str, str], ...]  # (plural, agreement class)
    question: dict[str, str]  # agreement class -> the question word ({q})
    containers: tuple[tuple[str, str], ...]  # (singular, plural)
    work: dict[str, str]  # units, tens, carry ({digit}), borrow: a sum worked column by column
    templates: dict[str, tuple[str, ...]]  # op -> training wordings
    heldout: dict[str, tuple[str, ...]]  # op -> evaluation-only wordings
    solutions: dict[str, str]  # op -> worked solution ({a} {b} {c})


@functools.cache
def wordings(language: str = "es") -> Wordings:
    """The math wordings of `language` (MissingText when its pack has no math.toml)."""
    raw = packs.texts(language, packs.MATH)
    return Wordings(
        language=language, instruction=raw["instruction"], answer=raw["answer"], names=tuple(raw["names"]),
        objects=tuple((o, cls) for cls, words in raw["objects"].items() for o in words),
        question=dict(raw["question"]), containers=tuple((s, p) for s, p in raw["containers"]),
        work=dict(raw["work"]),
        templates={op: tuple(raw["templates"][op]) for op in packs.OPS},
        heldout={op: tuple(raw["heldout"][op]) for op in packs.OPS},
        solutions={op: raw["solutions"][op] for op in packs.OPS},
    )
