"""Math word problems with verifiable numeric answers, for post-training and evaluation.

Three sources, one `MathProblem` shape:
  * an arithmetic word-problem generator in the corpus' language (`word_problems`; the
    wordings are the language pack's math.toml, `spanish_problems` the Spanish ones), the
    post-training benchmark target;
  * reasoning-gym procedural datasets (`rg_problems`, `gsm_problems`), English GSM-style;
  * GSM8K-format jsonl files (`read_gsm8k`).
Answer parsing lives in `math_answers` (re-exported here) so reward code needs no reasoning-gym.
Torch-free and Dagster-free: assets and the trainer import this, not the other way round.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines import languages
from pipelines.tasks import packs
from pipelines.tasks.math_answers import (
    extract_answer,
    format_number,
    has_answer_format,
    is_correct,
)
from pipelines.tasks.math_templates import wordings

__all__ = [
    "MathProblem", "MathTaskError", "eval_set_name", "eval_sets", "extract_answer", "format_number",
    "gsm_problems", "has_answer_format", "instruction", "is_correct", "math_eval_set", "prompt_for",
    "read_gsm8k", "reference_completion", "rg_problems", "spanish_problems", "word_problems",
]

HELDOUT_PER_MILLE = 150  # ~15% of operand sets / questions are held out


class MathTaskError(ValueError):
    """A math-task input (a GSM8K file) is malformed; the message names file, line and reason."""


@dataclass(frozen=True)
class MathProblem:
    question: str
    answer: float  # always a float, integral for most problems; format with format_number
    solution: str  # worked solution ending in the answer (SFT target inside <think>)
    source: str  # "es_arith/add2", "reasoning_gym/gsm_symbolic", "gsm8k:<file name>"
    id: str  # stable across runs; generated ids carry the language and the operands ("es:23+45:t0:1a2b3c4d")


def instruction(language: str = "es") -> str:
    """What every problem's prompt asks for (reason in <think>, the number in <answer>)."""
    return wordings(language).instruction


def _digest(*parts: object) -> int:
    # hashlib, not hash(): str hashing is salted per process, and the split must never move.
    data = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def _is_heldout(*key: object) -> bool:
    return _digest("yunque-math-split-v1", *key) % 1000 < HELDOUT_PER_MILLE


def _check_split(split: str) -> None:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")


# --- arithmetic word problems in the pack's language -----------------------------------------


def column_work(op: str, a: int, b: int, slip: tuple[int, int] = (0, 0), language: str = "es") -> tuple[str, int]:
    """Two-digit addition or subtraction worked column by column, the carry (or the
    borrow) written out, and its result. A small model cannot hold a carry in its head:
    it learns the hundred one-digit facts and copies digits, which generalises to unseen
    operands, where "a + b = c" in one step has to be memorised pair by pair.

    `slip` (units, tens) adds a mistake to a column's sum and carries it through the rest
    consistently: the wrong solutions a small model writes (preference data)."""
    w = wordings(language).work
    (at, au), (bt, bu) = divmod(a, 10), divmod(b, 10)
    if op == "add":
        units = max(0, au + bu + slip[0])
        carry = units // 10
        tens = max(0, at + bt + carry + slip[1])
        first = f"{w['units']} {au} + {bu} = {units}" + (w["carry"].format(digit=units % 10) if carry else ".")
        return f"{first} {w['tens']} {at} + {bt}" + (" + 1" if carry else "") + f" = {tens}.", tens * 10 + units % 10
    borrow = int(au < bu)
    units = min(9, max(0, au + 10 * borrow - bu + slip[0]))
    tens = max(0, at - bt - borrow + slip[1])
    first = f"{w['units']} {au + 10 * borrow} - {bu} = {units}" + (w["borrow"] if borrow else ".")
    return f"{first} {w['tens']} {at} - {bt}" + (" - 1" if borrow else "") + f" = {tens}.", tens * 10 + units


OPS = {"add": ("+", lambda a, b: a + b), "sub": ("-", lambda a, b: a - b),
       "mul": ("×", lambda a, b: a * b)}
_OP_LEVEL = {"add": "add2", "sub": "sub2", "mul": "mul1"}
_TWO = range(10, 100)
_LEVEL_PAIRS = {  # every operand pair a level can use; sub keeps a > b so answers stay >= 1
    "add2": [("add", a, b) for a in _TWO for b in _TWO],
    "sub2": [("sub", a, b) for a in _TWO for b in _TWO if a > b],
    "mul1": [("mul", a, b) for a in range(2, 10) for b in _TWO],
}
_LEVEL_PAIRS["mixed"] = [t for level in ("add2", "sub2", "mul1") for t in _LEVEL_PAIRS[level]]
LEVELS = tuple(_LEVEL_PAIRS)


@functools.cache
def operand_pool(level: str, split: str) -> tuple[tuple[str, int, int], ...]:
    """The (op, a, b) triples of `level` in `split`.

    Split rule: a triple is held out when sha256 of its *unordered operand set* falls in the
    lowest 15% -- the operation, order and template are not part of the key. So 23+45, 45+23
    and 45-23 all land in the same split, every level ("mixed" included) shares one split,
    and no held-out operand pair can reach training through another level or template."""
    _check_split(split)
    if level not in _LEVEL_PAIRS:
        raise ValueError(f"unknown level {level!r}; known: {', '.join(LEVELS)}")
    want = split == "heldout"
    return tuple(t for t in _LEVEL_PAIRS[level] if _is_heldout(*sorted(t[1:])) == want)


def _render(op: str, a: int, b: int, rng: random.Random, phrasing: str = "train", language: str = "es") -> MathProblem:
    w = wordings(language)
    templates = w.templates if phrasing == "train" else w.heldout
    ti = rng.randrange(len(templates[op]))
    n1, n2 = rng.sample(w.names, 2)
    obj, agreement = rng.choice(w.objects)
    c_sg, c_pl = rng.choice(w.containers)
    q = w.question[agreement]
    question = templates[op][ti].format(a=a, b=b, n1=n1, n2=n2, o=obj, q=q, c_sg=c_sg, c_pl=c_pl)
    sym, fn = OPS[op]
    c = fn(a, b)
    if op in ("add", "sub"):  # the closing sentence would only repeat "a + b = c" in a longer reply
        solution = f"{column_work(op, a, b, language=language)[0]} {a} {sym} {b} = {c}."
    else:
        solution = w.solutions[op].format(a=a, b=b, c=c) + " " + w.answer.format(c=c)
    qhash = hashlib.sha1(question.encode()).hexdigest()[:8]
    tag = "t" if phrasing == "train" else "h"  # h: a held-out wording
    return MathProblem(question, float(c), solution, f"{language}_arith/{_OP_LEVEL[op]}",
                       f"{language}:{a}{sym}{b}:{tag}{ti}:{qhash}")


def word_problems(
    n: int, split: str = "train", level: str = "add2", seed: int = 0, phrasing: str = "train", language: str = "es"
) -> list[MathProblem]:
    """`n` word problems in `language` of `level` ("add2", "sub2", "mul1", "mixed") from
    `split`, worded with the pack's training templates or, `phrasing="heldout"`, with the
    wordings kept for evaluation (math.toml's `heldout`; only with the held-out split).
    The operand split is the same in every language.

    Deterministic in (n, split, level, seed). Operand pairs are distinct until the pool is
    used up; "train" then starts another shuffled pass (same operands, fresh wording), while
    "heldout" raises ValueError, since repeating evaluation items would inflate the count."""
    if phrasing not in ("train", "heldout") or (phrasing == "heldout" and split != "heldout"):
        raise ValueError(f"phrasing must be 'train', or 'heldout' with split='heldout'; got {phrasing!r} "
                         f"with split={split!r}")
    pool = operand_pool(level, split)
    if split == "heldout" and n > len(pool):
        raise ValueError(f"held-out pool for level {level!r} has {len(pool)} operand pairs, "
                         f"fewer than n={n}")
    wordings(language)  # a language without math.toml fails here, naming the file
    rng = random.Random(_digest(f"{language}_arith", level, split, seed,
                                *(["rephrased"] if phrasing == "heldout" else [])))
    out: list[MathProblem] = []
    while len(out) < n:
        for op, a, b in rng.sample(pool, len(pool))[: n - len(out)]:
            out.append(_render(op, a, b, rng, phrasing, language))
    return out


def spanish_problems(
    n: int, split: str = "train", level: str = "add2", seed: int = 0, phrasing: str = "train"
) -> list[MathProblem]:
    """`word_problems` in Spanish."""
    return word_problems(n, split, level, seed, phrasing, "es")


# --- reasoning-gym ---------------------------------------------------------------------------

# GSM-like / arithmetic generators checked to give one numeric answer string per item.
RG_SOURCES = ("gsm_symbolic", "chain_sum", "basic_arithmetic", "products", "leg_counting")
# gsm_symbolic appends this English instruction; prompt_for supplies our own.
_RG_SUFFIX = " Give the result as your final answer. Do not include units."
_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K calculator annotations: "48/2 = <<48/2=24>>24"
_RG_SEED_STRIDE = 10_000_019  # see rg_problems: item i of seed s uses Random(s + i)


def _rg_problem(name: str, item: dict[str, Any], language: str = "es") -> MathProblem:
    question = item["question"].removesuffix(_RG_SUFFIX).strip()
    answer = float(item["answer"])
    meta = item.get("metadata", {})
    if "answer_cot" in meta:  # GSM-style worked solution ending "#### N"
        work = _CALC.sub("", meta["answer_cot"].rpartition("####")[0]).strip()
    elif "expression" in meta:
        work = f"{meta['expression']} = {format_number(answer)}."
    else:
        work = ""
    solution = f"{work}\n{wordings(language).answer.format(c=format_number(answer))}".strip()
    qhash = hashlib.sha1(question.encode()).hexdigest()[:12]
    return MathProblem(question, answer, solution, f"reasoning_gym/{name}", f"rg:{name}:{qhash}")


def rg_problems(
    name: str, n: int, split: str = "train", seed: int = 0, language: str = "es", **config: Any
) -> list[MathProblem]:
    """`n` distinct problems from reasoning-gym dataset `name` (one of RG_SOURCES).

    The split is a content hash of the question text, not a seed range: reasoning-gym seeds
    item i of dataset seed s with Random(s + i), so datasets with nearby seeds share items
    (seeds 0 and 1 share ~4% of questions), and small templates repeat questions within
    one seed. Hashing the question makes train/held-out disjoint whatever the seeds; we
    also drop repeats within one call. Our seed is spread by a large stride so that
    different seeds do not share reasoning-gym item streams. Note the same template can
    appear in both splits with different numbers/names (gsm_symbolic has only 85 templates).
    The questions are English; the solution's closing sentence is in `language`."""
    import reasoning_gym  # deferred: importing it registers ~100 generators

    _check_split(split)
    if name not in RG_SOURCES:
        raise ValueError(f"unknown reasoning-gym source {name!r}; known: {', '.join(RG_SOURCES)}")
    want, seen, out = split == "heldout", set(), []
    size, start = 8 * n + 64, 0
    while len(out) < n:
        if size > 200 * n + 10_000:
            raise ValueError(f"reasoning-gym {name!r} gave only {len(out)} distinct "
                             f"{split} problems; asked for {n}")
        # Item i depends only on (seed, i) and the task prefix is stable, so a bigger dataset
        # continues where the smaller one stopped.
        ds = reasoning_gym.create_dataset(name, seed=seed * _RG_SEED_STRIDE, size=size, **config)
        for idx in range(start, size):
            problem = _rg_problem(name, ds[idx], language)
            key = " ".join(problem.question.lower().split())
            if key not in seen and _is_heldout(name, key) == want:
                seen.add(key)
                out.append(problem)
                if len(out) == n:
                    break
        start, size = size, size * 2
    return out


def gsm_problems(n: int, split: str = "train", seed: int = 0, language: str = "es") -> list[MathProblem]:
    """`n` reasoning-gym gsm_symbolic problems (English) from `split`."""
    return rg_problems("gsm_symbolic", n, split, seed, language)


# --- GSM8K jsonl -----------------------------------------------------------------------------

_GSM_FINAL = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def read_gsm8k(path: str | Path, language: str | None = "es") -> list[MathProblem]:
    """Problems from a GSM8K-format jsonl file: {"question": ..., "answer": "... #### 72"};
    the worked solution closes with `language`'s answer sentence (None: the number alone,
    for a reader of the questions only).

    Blank lines are skipped; any other bad line raises MathTaskError naming file and line."""
    path = Path(path)
    closing = wordings(language).answer if language else "{c}"
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue

        def fail(reason: str, lineno: int = lineno) -> MathTaskError:
            return MathTaskError(f"{path}:{lineno}: {reason}")

        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise fail(f"invalid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise fail("record is not a JSON object")
        for field in ("question", "answer"):
            if not isinstance(record.get(field), str) or not record[field].strip():
                raise fail(f"missing or empty string field {field!r}")
        work, sep, final = record["answer"].rpartition("####")
        if not sep:
            raise fail("answer has no '####' final-answer marker")
        if not _GSM_FINAL.fullmatch(final.strip()):
            raise fail(f"final answer {final.strip()!r} is not a number")
        answer = float(final.strip().replace(",", ""))
        solution = f"{_CALC.sub('', work).strip()}\n{closing.format(c=format_number(answer))}"
        out.append(MathProblem(record["question"].strip(), answer, solution.strip(),
                               f"gsm8k:{path.name}", f"gsm8k:{path.name}:{lineno}"))
    return out


# --- evaluation sets and chat formatting -----------------------------------------------------

# <code>_<level>: held-out operands in the training wordings of a language's math.toml;
# <code>_<level>_rephrased: held-out operands in its wordings no training problem uses (its
# `heldout`). A level alone ("add2", "mixed_rephrased") means the configured language's set.
OTHER_SETS = ("gsm_symbolic", "gsm8k")


def _generated(name: str) -> tuple[str, str, bool] | None:
    """(language, level, rephrased) of a generated set's name, None for any other name."""
    code, sep, rest = name.partition("_")
    level = rest.removesuffix("_rephrased")
    if sep and level in LEVELS and code in languages.codes() and packs.has(code, packs.MATH):
        return code, level, rest.endswith("_rephrased")
    return None


def eval_sets() -> tuple[str, ...]:
    """Every evaluation set: the generated ones of each language with math.toml, then the others."""
    codes = [c for c in languages.codes() if packs.has(c, packs.MATH)]
    return (*(f"{c}_{lv}{r}" for c in codes for r in ("", "_rephrased") for lv in LEVELS), *OTHER_SETS)


def eval_set_name(name: str, language: str) -> str | None:
    """The set `name` means in a run in `language`: a level alone ("add2", "add2_rephrased")
    is that language's generated set ("fr_add2"), None when the language has no math.toml;
    any other name is itself."""
    level = name.removesuffix("_rephrased")
    if level in LEVELS:
        return f"{language}_{name}" if packs.has(language, packs.MATH) else None
    return name


def rephrased_twin(name: str) -> str | None:
    """The held-out-wording twin of a generated set (es_add2 -> es_add2_rephrased)."""
    generated = _generated(name)
    return f"{name}_rephrased" if generated and not generated[2] else None


def math_eval_set(name: str, n: int, seed: int = 0, path: str | None = None, language: str = "es") -> list[MathProblem]:
    """`n` evaluation problems. Generated sets come from the held-out split only; "gsm8k"
    takes the first `n` records of the file at `path` (ValueError if it has fewer). A level
    alone ("add2") is `language`'s set; the solutions of the others close in `language`."""
    name = eval_set_name(name, language) or name
    if generated := _generated(name):
        code, level, rephrased = generated
        return word_problems(n, "heldout", level, seed, "heldout" if rephrased else "train", code)
    if name == "gsm_symbolic":
        return gsm_problems(n, "heldout", seed, language)
    if name == "gsm8k":
        if path is None:
            raise ValueError("eval set 'gsm8k' needs path= to a GSM8K-format jsonl file")
        problems = read_gsm8k(path, language)
        if len(problems) < n:
            raise ValueError(f"{path} has {len(problems)} problems, fewer than n={n}")
        return problems[:n]
    raise ValueError(f"unknown math eval set {name!r}; known: {', '.join(eval_sets())}")


def prompt_for(problem: MathProblem, language: str = "es") -> list[dict[str, str]]:
    """Chat messages asking the model to solve `problem` with its answer in <answer> tags,
    the instruction in `language`."""
    return [{"role": "user", "content": f"{problem.question}\n\n{instruction(language)}"}]


def reference_completion(problem: MathProblem) -> str:
    """The SFT target in the format the reward expects: <think>work</think><answer>N</answer>."""
    return (f"<think>{problem.solution}</think>"
            f"<answer>{format_number(problem.answer)}</answer>")
