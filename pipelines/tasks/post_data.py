"""Post-training data (no torch, no Dagster): readers for the conventional formats and the
built-in sets made from the math generators.

    SFT          jsonl, one conversation per line: {"messages": [{"role": ..., "content": ...}, ...]}
    preferences  jsonl, one pair per line: {"prompt": ..., "chosen": ..., "rejected": ...}, where
                 the prompt is a string (one user turn) or a list of messages, and chosen /
                 rejected are strings or message lists ending in the assistant's reply

A bad record raises PostDataError naming the file, the line and the reason. Built-in sets
come from the math generators' *training* operands only (pipelines.tasks.math_tasks splits
held-out operand pairs by hash), so no evaluation problem is ever trained on.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from pipelines.tasks import math_tasks
from pipelines.tasks.math_answers import format_number

ROLES = ("system", "user", "assistant")


class PostDataError(ValueError):
    pass


@dataclass(frozen=True)
class Preference:
    prompt: tuple[dict, ...]  # the conversation up to the reply
    chosen: str  # the preferred assistant reply
    rejected: str
    kind: str = ""  # built-in pairs: what is wrong with the rejected reply


def _messages(value: object, where: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise PostDataError(f"{where}: expected a non-empty list of messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise PostDataError(f"{where}: message {i} is not an object")
        if m.get("role") not in ROLES:
            raise PostDataError(f"{where}: message {i} has role {m.get('role')!r}; expected one of {ROLES}")
        if not isinstance(m.get("content"), str):
            raise PostDataError(f"{where}: message {i} has no string 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _records(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise PostDataError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise PostDataError(f"{where}: invalid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise PostDataError(f"{where}: the record is not a JSON object")
            yield where, record


def read_sft(path: str | Path) -> list[list[dict]]:
    """Conversations with at least one assistant turn (the only tokens trained on)."""
    out = []
    for where, record in _records(path):
        messages = _messages(record.get("messages"), f"{where}: 'messages'")
        if not any(m["role"] == "assistant" for m in messages):
            raise PostDataError(f"{where}: no assistant message, so nothing to train on")
        out.append(messages)
    if not out:
        raise PostDataError(f"{path}: no conversations")
    return out


def _reply(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    messages = _messages(value, where)
    if messages[-1]["role"] != "assistant":
        raise PostDataError(f"{where}: the last message must be the assistant's reply")
    return messages[-1]["content"]


def read_preferences(path: str | Path) -> list[Preference]:
    out = []
    for where, record in _records(path):
        for field in ("prompt", "chosen", "rejected"):
            if field not in record:
                raise PostDataError(f"{where}: missing field {field!r}")
        prompt = record["prompt"]
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = _messages(prompt, f"{where}: 'prompt'")
        if messages[-1]["role"] == "assistant":
            raise PostDataError(f"{where}: the prompt ends with an assistant message; the reply goes in chosen/rejected")
        chosen = _reply(record["chosen"], f"{where}: 'chosen'")
        rejected = _reply(record["rejected"], f"{where}: 'rejected'")
        if chosen == rejected:
            raise PostDataError(f"{where}: chosen and rejected are the same reply")
        out.append(Preference(tuple(messages), chosen, rejected))
    if not out:
        raise PostDataError(f"{path}: no preference pairs")
    return out


# --- built-in sets from the math generators (training operands only) -------------------------

def math_problems(n: int, level: str, seed: int, language: str = "es") -> list[math_tasks.MathProblem]:
    return math_tasks.word_problems(n, "train", level, seed, language=language)


def math_sft(n: int, level: str = "add2", seed: int = 0, language: str = "es") -> list[list[dict]]:
    """Conversations: the problem with the instruction, the worked solution as the reply."""
    return [[*math_tasks.prompt_for(p, language),
             {"role": "assistant", "content": math_tasks.reference_completion(p)}]
            for p in math_problems(n, level, seed, language)]


def _wrong_answer(answer: float, rng: random.Random) -> float:
    # the mistakes a small model makes: a lost carry (off by 10), a slipped digit (off by 1-9)
    for _ in range(10):
        wrong = answer + rng.choice([-10, 10, -1, 1, rng.randint(-9, 9), rng.randint(-30, 30)])
        if wrong != answer and wrong >= 0:
            return wrong
    return answer + 1


def _slipped(p: math_tasks.MathProblem, rng: random.Random) -> str | None:
    """The worked solution with one column's sum off by one or two, carried through to a
    wrong result, as a small model gets it wrong; None for problems not worked by column."""
    match = re.match(r"([a-z]{2}):(\d+)([-+])(\d+):", p.id)  # a generated problem: its language, its operands
    if not match:
        return None
    language, a, sym, b = match[1], int(match[2]), match[3], int(match[4])
    op = "add" if sym == "+" else "sub"
    for _ in range(10):
        delta = rng.choice((-2, -1, 1, 2))
        work, wrong = math_tasks.column_work(op, a, b, (delta, 0) if rng.random() < 0.5 else (0, delta), language)
        if wrong != p.answer and wrong > 0:
            return f"<think>{work} {a} {sym} {b} = {wrong}.</think><answer>{wrong}</answer>"
    return None


def _rejected(p: math_tasks.MathProblem, rng: random.Random) -> tuple[str, str]:
    right = format_number(p.answer)
    kind = rng.choice(("wrong_step", "wrong_step", "wrong_answer", "no_answer_tags", "unfinished"))
    if kind == "wrong_step" and (slipped := _slipped(p, rng)) is not None:
        return slipped, kind
    if kind in ("wrong_step", "wrong_answer"):  # the same working with a wrong result where it is stated
        kind = "wrong_answer"
        wrong = format_number(_wrong_answer(p.answer, rng))
        work = p.solution[::-1].replace(right[::-1], wrong[::-1], 1)[::-1]
        return f"<think>{work}</think><answer>{wrong}</answer>", kind
    if kind == "no_answer_tags":
        return f"<think>{p.solution}</think>{right}", kind
    words = p.solution.split()
    return f"<think>{' '.join(words[:max(1, len(words) // 2)])}", kind


def math_preferences(n: int, level: str = "add2", seed: int = 0, language: str = "es") -> list[Preference]:
    """Pairs: the worked solution (chosen) against one with a slipped column carried to a
    wrong result, one whose working is right but whose stated result is wrong, a reply
    without answer tags, or one cut off half way (rejected)."""
    rng = random.Random(seed)
    out = []
    for p in math_problems(n, level, seed + 1_000, language):  # other wordings than the SFT set's
        rejected, kind = _rejected(p, rng)
        out.append(Preference(tuple(math_tasks.prompt_for(p, language)), math_tasks.reference_completion(p),
                              rejected, kind))
    return out


def split_heldout(items: list, fraction: float, seed: int) -> tuple[list, list]:
    """(train, held-out): a seeded shuffle, the last `fraction` held out (at least one item
    each when there are two or more)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    k = min(len(items) - 1, max(1, round(len(items) * fraction))) if len(items) > 1 and fraction > 0 else 0
    held = set(order[len(items) - k:])
    return [x for i, x in enumerate(items) if i not in held], [x for i, x in enumerate(items) if i in held]
