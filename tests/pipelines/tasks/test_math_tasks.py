"""Math tasks: Spanish generator split, reasoning-gym wrapper, GSM8K reader, answer parsing.

Everything is generated in-process (reasoning-gym is procedural), so nothing touches the network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipelines.tasks import math_tasks as mt
from pipelines.tasks.math_tasks import (
    MathProblem,
    MathTaskError,
    extract_answer,
    format_number,
    gsm_problems,
    has_answer_format,
    is_correct,
    math_eval_set,
    prompt_for,
    read_gsm8k,
    reference_completion,
    rg_problems,
    spanish_problems,
)
from pipelines.tasks.math_templates import wordings

INSTRUCTION = wordings("es").instruction

ID_RE = re.compile(r"es:(\d+)([+\-×])(\d+):[th]\d+:[0-9a-f]{8}")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "×": lambda a, b: a * b}


def operands(p: MathProblem) -> tuple[str, int, int]:
    m = ID_RE.fullmatch(p.id)
    assert m, p.id
    return m[2], int(m[1]), int(m[3])


def operand_sets(problems: list[MathProblem]) -> set[tuple[int, int]]:
    return {tuple(sorted(operands(p)[1:])) for p in problems}


# --- Spanish generator -----------------------------------------------------------------------


@pytest.mark.parametrize("level", ["add2", "sub2", "mul1", "mixed"])
def test_pools_partition_level_with_about_15_percent_heldout(level):
    train, held = mt.operand_pool(level, "train"), mt.operand_pool(level, "heldout")
    assert not set(train) & set(held)
    assert len(train) + len(held) == len(mt._LEVEL_PAIRS[level])
    assert 0.10 < len(held) / (len(train) + len(held)) < 0.20


def test_no_operand_set_leaks_from_heldout_into_any_train_problem():
    train = [p for lv in mt.LEVELS for s in (0, 1, 2) for p in spanish_problems(4000, "train", lv, s)]
    held = [p for lv in mt.LEVELS for p in spanish_problems(len(mt.operand_pool(lv, "heldout")),
                                                            "heldout", lv, 7)]
    assert not operand_sets(train) & operand_sets(held)
    # the whole pools too: 23+45 held out means 45+23 and 45-23 are held out as well
    all_train = {tuple(sorted(t[1:])) for t in mt.operand_pool("mixed", "train")}
    assert not all_train & {tuple(sorted(t[1:])) for t in mt.operand_pool("mixed", "heldout")}


def test_heldout_pool_sizes_are_pinned():
    # The split must never move: a changed hash key would silently put evaluation operands into
    # data that earlier checkpoints were trained on. Change these only with a new split version.
    sizes = {lv: len(mt.operand_pool(lv, "heldout")) for lv in mt.LEVELS}
    assert sizes == {"add2": 1257, "sub2": 621, "mul1": 105, "mixed": 1983}


@pytest.mark.parametrize("level", ["add2", "sub2", "mul1", "mixed"])
def test_answers_and_solutions_are_correct(level):
    for p in spanish_problems(300, "train", level, 3) + spanish_problems(50, "heldout", level, 3):
        sym, a, b = operands(p)
        assert p.answer == OPS[sym](a, b) and p.answer >= 1
        assert f"{a}" in p.question and f"{b}" in p.question
        assert p.solution.endswith(f"{format_number(p.answer)}.")
        assert f"{a} {sym} {b} = {format_number(p.answer)}" in p.solution
        assert extract_answer(p.solution) == p.answer
        for x, op, y, *borrow, z in re.findall(r"(\d+) ([-+×]) (\d+)(?: [-+] (1))? = (\d+)", p.solution):
            carried = int(borrow[0] or 0) * (1 if op == "+" else -1)
            assert OPS[op](int(x), int(y)) + carried == int(z), p.solution  # every column's step is right
        expected_source = {"+": "add2", "-": "sub2", "×": "mul1"}[sym]
        assert p.source == f"es_arith/{expected_source}"
        if level != "mixed":
            assert p.source == f"es_arith/{level}"
        if level in ("add2", "sub2"):
            assert 10 <= a <= 99 and 10 <= b <= 99
        if level == "sub2":
            assert a > b


def test_levels_use_the_expected_operations():
    assert {operands(p)[0] for p in spanish_problems(300, "train", "mixed", 0)} == {"+", "-", "×"}
    assert all(2 <= operands(p)[1] <= 9 for p in spanish_problems(200, "train", "mul1", 0))


def test_question_agrees_in_gender_with_the_counted_noun():
    gender = dict(wordings("es").objects) | {"pasajeros": "m", "euros": "m", "butacas": "f", "páginas": "f", "puntos": "m",
                                 "personas": "f", "cartas": "f", "gallinas": "f", "litros": "m", "coches": "m",
                                 "minutos": "m"}
    problems = spanish_problems(2000, "train", "mixed", 5) + spanish_problems(300, "heldout", "mixed", 5, "heldout")
    asked = 0
    for p in problems:
        if m := re.search(r"¿(Cuántos|Cuántas|cuántos|cuántas) (\w+)", p.question):  # bare sums ask no noun
            word, noun = m.groups()
            assert (word.lower() == "cuántas") == (gender[noun] == "f"), p.question
            asked += 1
    assert asked > 1500


def test_generation_is_deterministic_and_seed_dependent():
    a = spanish_problems(200, "train", "add2", 0)
    assert a == spanish_problems(200, "train", "add2", 0)
    b = spanish_problems(200, "train", "add2", 1)
    assert [p.id for p in a] != [p.id for p in b]
    assert len({p.id for p in a}) == 200  # distinct operands until the pool runs out
    assert spanish_problems(5, "heldout", "add2", 0) != spanish_problems(5, "heldout", "add2", 1)


def test_train_wraps_past_pool_but_heldout_refuses():
    pool = len(mt.operand_pool("mul1", "train"))
    assert len(spanish_problems(pool + 50, "train", "mul1", 0)) == pool + 50
    held = len(mt.operand_pool("mul1", "heldout"))
    assert len(spanish_problems(held, "heldout", "mul1", 0)) == held
    with pytest.raises(ValueError, match=r"held-out pool for level 'mul1' has \d+"):
        spanish_problems(held + 1, "heldout", "mul1", 0)


def test_bad_level_or_split():
    with pytest.raises(ValueError, match="known: add2, sub2, mul1, mixed"):
        spanish_problems(1, "train", "div2")
    with pytest.raises(ValueError, match="split must be"):
        spanish_problems(1, "test")


@pytest.mark.timeout(60)  # a hang guard, not a benchmark: a pool rebuilt per problem would take minutes
def test_thousand_problems():
    problems = spanish_problems(1000, "train", "mixed", 0)
    assert len(problems) == 1000 and len({p.id for p in problems}) == 1000


# --- reasoning-gym ---------------------------------------------------------------------------


def test_gsm_split_is_disjoint_deterministic_and_clean():
    held = gsm_problems(50, "heldout", 0)
    train = gsm_problems(400, "train", 0) + gsm_problems(400, "train", 1)
    assert not {p.question for p in held} & {p.question for p in train}
    assert held == gsm_problems(50, "heldout", 0)
    assert {p.id for p in gsm_problems(50, "train", 0)} != {p.id for p in gsm_problems(50, "train", 1)}
    assert len({p.question for p in held}) == 50
    for p in held + train[:100]:
        assert p.source == "reasoning_gym/gsm_symbolic" and p.id.startswith("rg:gsm_symbolic:")
        assert "Give the result" not in p.question and "####" not in p.solution
        assert p.solution.endswith(f"La respuesta es {format_number(p.answer)}.")


@pytest.mark.parametrize("name", mt.RG_SOURCES)
def test_every_rg_source_gives_numeric_answers(name):
    for p in rg_problems(name, 20, "heldout", 0):
        assert is_correct(extract_answer(reference_completion(p)), p.answer)


def test_rg_config_is_passed_through_and_unknown_source_refused():
    for p in rg_problems("chain_sum", 20, "train", 0, min_digits=1, max_digits=2):
        assert all(len(t) <= 2 for t in re.findall(r"\d+", p.question))
    with pytest.raises(ValueError, match="known: gsm_symbolic"):
        rg_problems("sudoku", 1)


# --- GSM8K reader ----------------------------------------------------------------------------


def write_jsonl(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "gsm.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rec(question: str = "¿Cuánto?", answer: str = "Son 48/2 = <<48/2=24>>24.\n#### 24") -> str:
    return json.dumps({"question": question, "answer": answer}, ensure_ascii=False)


def test_read_gsm8k_parses_answers_and_strips_annotations(tmp_path):
    path = write_jsonl(tmp_path, [rec(), "", "   ", rec("Q2", "x\n#### 1,000"),
                                  rec("Q3", "y\n#### -5"), rec("Q4", "z\n####3.5")])
    problems = read_gsm8k(path)
    assert [p.answer for p in problems] == [24.0, 1000.0, -5.0, 3.5]
    assert problems[0].solution == "Son 48/2 = 24.\nLa respuesta es 24."
    assert [p.id for p in problems] == [f"gsm8k:gsm.jsonl:{n}" for n in (1, 4, 5, 6)]
    assert problems[0].source == "gsm8k:gsm.jsonl"


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"question": "q", "answer": "#### 3"', "invalid JSON"),
        ('["q", "#### 3"]', "not a JSON object"),
        ('{"answer": "#### 3"}', "'question'"),
        ('{"question": "q"}', "'answer'"),
        ('{"question": "q", "answer": 3}', "'answer'"),
        ('{"question": "q", "answer": "la respuesta es 3"}', "no '####'"),
        ('{"question": "q", "answer": "#### tres"}', "'tres' is not a number"),
        ('{"question": "q", "answer": "#### 1,00"}', "is not a number"),
    ],
)
def test_read_gsm8k_bad_records_name_file_line_and_reason(tmp_path, line, reason):
    path = write_jsonl(tmp_path, [rec(), "", line])
    with pytest.raises(MathTaskError, match=re.escape(reason)) as err:
        read_gsm8k(path)
    assert isinstance(err.value, ValueError)
    assert f"{path}:3:" in str(err.value)


# --- answer extraction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<answer>68</answer>", 68.0),
        ("<answer> 42 </answer>", 42.0),
        ("<answer>-7</answer>", -7.0),
        ("<answer>1,000</answer>", 1000.0),
        ("<answer>12,345,678</answer>", 12345678.0),
        ("<answer>1,234.5</answer>", 1234.5),
        ("<answer>3,5</answer>", 3.5),  # Spanish decimal comma
        ("<answer>0,125</answer>", 0.125),  # "0," cannot start a thousands grouping
        ("<answer>3.50</answer>", 3.5),
        ("<answer>12.</answer>", 12.0),
        ("<answer>$5</answer>", 5.0),
        ("<answer>-$5</answer>", -5.0),
        ("<answer>−4</answer>", -4.0),  # U+2212 minus
        ("<answer>1.000.000</answer>", 1_000_000.0),
        ("<answer>1.234,5</answer>", 1234.5),  # the full Spanish form
        ("<answer>1 234</answer>", 1234.0),  # RAE thousands grouping, inside a tag
        ("<answer>12\u00a0345\u00a0678</answer>", 12_345_678.0),  # no-break spaces
        ("Son 12 345", 345.0),  # outside a tag a space separates numbers
        ("<answer>3/4</answer>", 0.75),
        ("<answer>-3/4</answer>", -0.75),
        ("<answer>3/0</answer>", None),
        ("<answer>cuarenta</answer>", None),  # a tag without a number: no fall back
        ("Hay 5 y 6. <answer>cuarenta</answer>", None),
        ("<answer>1</answer> luego <answer>2</answer>", 2.0),  # last tag wins
        ("<answer><answer>5</answer></answer>", 5.0),  # nested: innermost last opening
        ("<think>23 + 45 = 68</think><answer>68</answer>", 68.0),
        ("Lucía tiene 23 manzanas y compra 45. <answer>68", 68.0),  # cut off before </answer>
        ("<answer>12</answer", 12.0),  # garbled closing tag
        ("<answer>23 + 45 = 68 manzanas</answer>", 68.0),
        ("</answer> 9", 9.0),  # a stray closing tag alone is not an answer tag
        ("El resultado es 68.", 68.0),
        ("Tiene 23 y compra 45, así que 23 + 45 = 68 en total", 68.0),
        ("45 - 23 = 22", 22.0),
        ("45-23", 23.0),  # a hyphen after a digit is subtraction, not a sign
        ("x=-7", -7.0),
        ("Entonces...68", 68.0),
        ("no hay ningún número aquí", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.timeout(60)  # a hang guard: catastrophic regex backtracking would not finish
def test_extract_answer_on_extremely_long_text():
    text = "palabra 12, " * 200_000 + "<answer>7</answer>" + " 3" * 100_000
    assert extract_answer(text) == 7.0
    assert extract_answer(text.replace("<answer>7</answer>", "")) == 3.0
    assert extract_answer("9" * 100_000 + " y 7") == 7.0


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<answer>68</answer>", True),
        ("<think>23 + 45 = 68</think><answer>68</answer>", True),
        ("<answer> -3,5 </answer>", True),
        ("<answer>$1,000.</answer>", True),
        ("<answer>68 manzanas</answer>", False),
        ("<answer>cuarenta</answer>", False),
        ("<answer></answer>", False),
        ("<answer>1</answer><answer>2</answer>", False),
        ("<answer>68", False),
        ("68</answer>", False),
        ("</answer>68<answer>", False),
        ("El resultado es 68.", False),
    ],
)
def test_has_answer_format(text, ok):
    assert has_answer_format(text) is ok


@pytest.mark.parametrize(
    "predicted, expected, ok",
    [(68.0, 68.0, True), (68.0000001, 68.0, True), (68.5, 68.0, False), (None, 68.0, False),
     (float("nan"), 1.0, False), (-7.0, -7.0, True), (1e12 + 1, 1e12, True), (0.0, 1e-9, True)],
)
def test_is_correct(predicted, expected, ok):
    assert is_correct(predicted, expected) is ok


@pytest.mark.parametrize("value, text", [(68.0, "68"), (-7.0, "-7"), (3.5, "3.5"), (0.0, "0"),
                                         (1e6, "1000000"), (9281.25, "9281.25")])
def test_format_number(value, text):
    assert format_number(value) == text


# --- eval sets and chat formatting -----------------------------------------------------------


def test_eval_sets_use_heldout_only(tmp_path):
    held = {tuple(sorted(t[1:])) for t in mt.operand_pool("mixed", "heldout")}
    for name in ("es_add2", "es_mixed"):
        problems = math_eval_set(name, 100, seed=1)
        assert len(problems) == 100 and operand_sets(problems) <= held
    assert math_eval_set("es_add2", 10) == spanish_problems(10, "heldout", "add2", 0)
    assert math_eval_set("gsm_symbolic", 10) == gsm_problems(10, "heldout", 0)
    path = write_jsonl(tmp_path, [rec(), rec("Q2", "#### 2")])
    assert [p.answer for p in math_eval_set("gsm8k", 1, path=str(path))] == [24.0]
    with pytest.raises(ValueError, match="fewer than n=3"):
        math_eval_set("gsm8k", 3, path=str(path))
    with pytest.raises(ValueError, match="needs path="):
        math_eval_set("gsm8k", 1)
    with pytest.raises(ValueError, match="known: .*es_add2, .*gsm8k"):
        math_eval_set("es_div", 1)


def test_prompt_and_reference_completion():
    p = spanish_problems(1, "train", "add2", 0)[0]
    [message] = prompt_for(p)
    assert message["role"] == "user"
    assert message["content"].startswith(p.question) and message["content"].endswith(INSTRUCTION)
    ref = reference_completion(p)
    assert ref == f"<think>{p.solution}</think><answer>{int(p.answer)}</answer>"
    assert has_answer_format(ref) and is_correct(extract_answer(ref), p.answer)
    half = MathProblem("¿?", 3.5, "7 / 2 = 3,5. La respuesta es 3,5.", "x", "x:1")
    assert reference_completion(half).endswith("<answer>3.5</answer>")


def test_rephrased_sets_use_wordings_no_training_problem_uses():
    """The held-out wordings: never in training, every one of them in the rephrased sets,
    and only with held-out operands."""
    HELDOUT_TEMPLATES, TEMPLATES = wordings("es").heldout, wordings("es").templates
    assert not set(TEMPLATES["add"] + TEMPLATES["sub"] + TEMPLATES["mul"]) & set(
        HELDOUT_TEMPLATES["add"] + HELDOUT_TEMPLATES["sub"] + HELDOUT_TEMPLATES["mul"])
    train = spanish_problems(3000, "train", "mixed", 0)
    rephrased = mt.math_eval_set("es_mixed_rephrased", 300)
    assert all(":h" in p.id for p in rephrased) and all(":t" in p.id for p in train)
    assert {int(p.id.split(":")[2][1:]) for p in rephrased} == set(range(5))  # every held-out wording is drawn
    # a held-out wording's fixed words (its first two) never start a training question
    starts = {" ".join(p.question.split()[:2]) for p in train}
    assert "¿Cuánto es" not in starts and "Por la" not in starts
    # operands are held out too, and a rephrased set is not the plain held-out set reworded at random
    held = {tuple(sorted(map(int, ID_RE.match(p.id).group(1, 3)))) for p in rephrased}
    assert not held & {tuple(sorted(map(int, ID_RE.match(p.id).group(1, 3)))) for p in train}
    assert [p.answer for p in rephrased] == [p.answer for p in mt.math_eval_set("es_mixed_rephrased", 300)]
    with pytest.raises(ValueError, match="phrasing"):
        spanish_problems(5, "train", "add2", 0, "heldout")
