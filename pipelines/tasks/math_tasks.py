"""Math word problems with verifiable numeric answers, for post-training and evaluation.

Three sources, one `MathProblem` shape:
  * a Spanish arithmetic generator (`spanish_problems`), the post-training benchmark target;
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

from pipelines.tasks.math_answers import (
    extract_answer,
    format_number,
    has_answer_format,
    is_correct,
)
from pipelines.tasks.math_templates import (
    CONTAINERS,
    HELDOUT_TEMPLATES,
    NAMES,
    OBJECTS,
    SOLUTIONS,
    TEMPLATES,
)

__all__ = [
    "INSTRUCTION", "MathProblem", "MathTaskError", "extract_answer", "format_number",
    "gsm_problems", "has_answer_format", "is_correct", "math_eval_set", "prompt_for",
    "read_gsm8k", "reference_completion", "rg_problems", "spanish_problems",
]

INSTRUCTION = (
    "Piensa paso a paso dentro de <think></think> y escribe el resultado final, "
    "solo el número, dentro de <answer></answer>."
)
HELDOUT_PER_MILLE = 150  # ~15% of operand sets / questions are held out


class MathTaskError(ValueError):
    """A math-task input (a GSM8K file) is malformed; the message names file, line and reason."""


@dataclass(frozen=True)
class MathProblem:
    question: str
    answer: float  # always a float, integral for most problems; format with format_number
    solution: str  # worked solution ending in the answer (SFT target inside <think>)
    source: str  # "es_arith/add2", "reasoning_gym/gsm_symbolic", "gsm8k:<file name>"
    id: str  # stable across runs; Spanish ids carry the operands ("es:23+45:t0:1a2b3c4d")


def _digest(*parts: object) -> int:
    # hashlib, not hash(): str hashing is salted per process, and the split must never move.
    data = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def _is_heldout(*key: object) -> bool:
    return _digest("yunque-math-split-v1", *key) % 1000 < HELDOUT_PER_MILLE


def _check_split(split: str) -> None:
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")


# --- Spanish arithmetic generator ------------------------------------------------------------



def column_work(op: str, a: int, b: int, slip: tuple[int, int] = (0, 0)) -> tuple[str, int]:
    """Two-digit addition or subtraction worked column by column, the carry (or the
    borrow) written out, and its result. A small model cannot hold a carry in its head:
    it learns the hundred one-digit facts and copies digits, which generalises to unseen
    operands, where "a + b = c" in one step has to be memorised pair by pair.

    `slip` (units, tens) adds a mistake to a column's sum and carries it through the rest
    consistently: the wrong solutions a small model writes (preference data)."""
    (at, au), (bt, bu) = divmod(a, 10), divmod(b, 10)
    if op == "add":
        units = max(0, au + bu + slip[0])
        carry = units // 10
        tens = max(0, at + bt + carry + slip[1])
        first = f"Unidades: {au} + {bu} = {units}" + (f", escribo {units % 10} y llevo 1." if carry else ".")
        return f"{first} Decenas: {at} + {bt}" + (" + 1" if carry else "") + f" = {tens}.", tens * 10 + units % 10
    borrow = int(au < bu)
    units = min(9, max(0, au + 10 * borrow - bu + slip[0]))
    tens = max(0, at - bt - borrow + slip[1])
    first = f"Unidades: {au + 10 * borrow} - {bu} = {units}" + (", pido 1." if borrow else ".")
    return f"{first} Decenas: {at} - {bt}" + (" - 1" if borrow else "") + f" = {tens}.", tens * 10 + units


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


def _render(op: str, a: int, b: int, rng: random.Random, phrasing: str = "train") -> MathProblem:
    templates = TEMPLATES if phrasing == "train" else HELDOUT_TEMPLATES
    ti = rng.randrange(len(templates[op]))
    n1, n2 = rng.sample(NAMES, 2)
    obj, gender = rng.choice(OBJECTS)
    c_sg, c_pl = rng.choice(CONTAINERS)
    q = "¿Cuántas" if gender == "f" else "¿Cuántos"
    question = templates[op][ti].format(a=a, b=b, n1=n1, n2=n2, o=obj, q=q, c_sg=c_sg, c_pl=c_pl)
    sym, fn = OPS[op]
    c = fn(a, b)
    if op in ("add", "sub"):  # the closing sentence would only repeat "a + b = c" in a longer reply
        solution = f"{column_work(op, a, b)[0]} {a} {sym} {b} = {c}."
    else:
        solution = SOLUTIONS[op].format(a=a, b=b, c=c) + f" La respuesta es {c}."
    qhash = hashlib.sha1(question.encode()).hexdigest()[:8]
    tag = "t" if phrasing == "train" else "h"  # h: a held-out wording
    return MathProblem(question, float(c), solution, f"es_arith/{_OP_LEVEL[op]}",
                       f"es:{a}{sym}{b}:{tag}{ti}:{qhash}")


def spanish_problems(
    n: int, split: str = "train", level: str = "add2", seed: int = 0, phrasing: str = "train"
) -> list[MathProblem]:
    """`n` Spanish word problems of `level` ("add2", "sub2", "mul1", "mixed") from `split`,
    worded with the training templates or, `phrasing="heldout"`, with the wordings kept
    for evaluation (`math_templates.HELDOUT_TEMPLATES`; only with the held-out split).

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
    rng = random.Random(_digest("es_arith", level, split, seed, *(["rephrased"] if phrasing == "heldout" else [])))
    out: list[MathProblem] = []
    while len(out) < n:
        for op, a, b in rng.sample(pool, len(pool))[: n - len(out)]:
            out.append(_render(op, a, b, rng, phrasing))
    return out


# --- reasoning-gym ---------------------------------------------------------------------------

# GSM-like / arithmetic generators checked to give one numeric answer string per item.
RG_SOURCES = ("gsm_symbolic", "chain_sum", "basic_arithmetic", "products", "leg_counting")
# gsm_symbolic appends this English instruction; prompt_for supplies our own.
_RG_SUFFIX = " Give the result as your final answer. Do not include units."
_CALC = re.compile(r"<<[^<>]*>>")  # GSM8K calculator annotations: "48/2 = <<48/2=24>>24"
_RG_SEED_STRIDE = 10_000_019  # see rg_problems: item i of seed s uses Random(s + i)


def _rg_problem(name: str, item: dict[str, Any]) -> MathProblem:
    question = item["question"].removesuffix(_RG_SUFFIX).strip()
    answer = float(item["answer"])
    meta = item.get("metadata", {})
    if "answer_cot" in meta:  # GSM-style worked solution ending "#### N"
        work = _CALC.sub("", meta["answer_cot"].rpartition("####")[0]).strip()
    elif "expression" in meta:
        work = f"{meta['expression']} = {format_number(answer)}."
    else:
        work = ""
    solution = f"{work}\nLa respuesta es {format_number(answer)}.".strip()
    qhash = hashlib.sha1(question.encode()).hexdigest()[:12]
    return MathProblem(question, answer, solution, f"reasoning_gym/{name}", f"rg:{name}:{qhash}")


def rg_problems(
    name: str, n: int, split: str = "train", seed: int = 0, **config: Any
) -> list[MathProblem]:
    """`n` distinct problems from reasoning-gym dataset `name` (one of RG_SOURCES).

    The split is a content hash of the question text, not a seed range: reasoning-gym seeds
    item i of dataset seed s with Random(s + i), so datasets with nearby seeds share items
    (seeds 0 and 1 share ~4% of questions), and small templates repeat questions within
    one seed. Hashing the question makes train/held-out disjoint whatever the seeds; we
    also drop repeats within one call. Our seed is spread by a large stride so that
    different seeds do not share reasoning-gym item streams. Note the same template can
    appear in both splits with different numbers/names (gsm_symbolic has only 85 templates)."""
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
            problem = _rg_problem(name, ds[idx])
            key = " ".join(problem.question.lower().split())
            if key not in seen and _is_heldout(name, key) == want:
                seen.add(key)
                out.append(problem)
                if len(out) == n:
                    break
        start, size = size, size * 2
    return out


def gsm_problems(n: int, split: str = "train", seed: int = 0) -> list[MathProblem]:
    """`n` reasoning-gym gsm_symbolic problems (English) from `split`."""
    return rg_problems("gsm_symbolic", n, split, seed)


# --- GSM8K jsonl -----------------------------------------------------------------------------

_GSM_FINAL = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def read_gsm8k(path: str | Path) -> list[MathProblem]:
    """Problems from a GSM8K-format jsonl file: {"question": ..., "answer": "... #### 72"}.

    Blank lines are skipped; any other bad line raises MathTaskError naming file and line."""
    path = Path(path)
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
        solution = f"{_CALC.sub('', work).strip()}\nLa respuesta es {format_number(answer)}."
        out.append(MathProblem(record["question"].strip(), answer, solution.strip(),
                               f"gsm8k:{path.name}", f"gsm8k:{path.name}:{lineno}"))
    return out


# --- evaluation sets and chat formatting -----------------------------------------------------

# es_<level>: held-out operands in the training wordings; es_<level>_rephrased: held-out
# operands in wordings no training problem uses (math_templates.HELDOUT_TEMPLATES).
EVAL_SETS = ("es_add2", "es_sub2", "es_mul1", "es_mixed", "es_add2_rephrased", "es_sub2_rephrased",
             "es_mul1_rephrased", "es_mixed_rephrased", "gsm_symbolic", "gsm8k")


def rephrased_twin(name: str) -> str | None:
    """The held-out-wording twin of a generated Spanish set (es_add2 -> es_add2_rephrased)."""
    twin = f"{name}_rephrased"
    return twin if name.startswith("es_") and twin in EVAL_SETS else None


def math_eval_set(name: str, n: int, seed: int = 0, path: str | None = None) -> list[MathProblem]:
    """`n` evaluation problems. Generated sets come from the held-out split only; "gsm8k"
    takes the first `n` records of the file at `path` (ValueError if it has fewer)."""
    if name.startswith("es_") and name in EVAL_SETS:
        level, rephrased = name.removeprefix("es_").removesuffix("_rephrased"), name.endswith("_rephrased")
        return spanish_problems(n, "heldout", level, seed, "heldout" if rephrased else "train")
    if name == "gsm_symbolic":
        return gsm_problems(n, "heldout", seed)
    if name == "gsm8k":
        if path is None:
            raise ValueError("eval set 'gsm8k' needs path= to a GSM8K-format jsonl file")
        problems = read_gsm8k(path)
        if len(problems) < n:
            raise ValueError(f"{path} has {len(problems)} problems, fewer than n={n}")
        return problems[:n]
    raise ValueError(f"unknown math eval set {name!r}; known: {', '.join(EVAL_SETS)}")


def prompt_for(problem: MathProblem) -> list[dict[str, str]]:
    """Chat messages asking the model to solve `problem` with its answer in <answer> tags."""
    return [{"role": "user", "content": f"{problem.question}\n\n{INSTRUCTION}"}]


def reference_completion(problem: MathProblem) -> str:
    """The SFT target in the format the reward expects: <think>work</think><answer>N</answer>."""
    return (f"<think>{problem.solution}</think>"
            f"<answer>{format_number(problem.answer)}</answer>")
