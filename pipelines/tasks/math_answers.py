"""Answer extraction and checking for math tasks: shared by evaluation and (later) RL rewards.

Kept apart from `math_tasks` (problem sources) so reward code can import it without pulling in
reasoning-gym. Torch-free and dependency-free on purpose. Numbers are read as a Spanish or
English reader would, where the two disagree on separators: a dot is a decimal point unless
there are two or more dot groups, a comma groups thousands only in a well-formed grouping
and is otherwise a decimal comma; inside an <answer> tag "1 234" and "3/4" are read too.
The rules in full: docs/evaluation.md#math-tasks.
"""

from __future__ import annotations

import math
import re

_BODY = (
    r"[1-9]\d{0,2}(?:\.\d{3})+,\d+"  # "1.234,5": Spanish thousands dots with a decimal comma
    r"|[1-9]\d{0,2}(?:,\d{3})+(?!\d)(?:\.\d+)?"  # thousands commas, optional decimals
    r"|[1-9]\d{0,2}(?:\.\d{3}){2,}(?!\.?\d)"  # "1.000.000": two+ dot groups can't be decimal
    r"|\d+,\d+"  # Spanish decimal comma
    r"|\d+(?:\.\d+)?"  # plain integer / decimal point
)
# No word character before the number (nor before its sign: "45-23" is a subtraction), and no
# "digit." either, so the tail of "1.5.3" is not read as a second number.
_NUMBER = re.compile(rf"(?<!\w)(?<!\d\.)(?P<sign>[-−](?=\$?\d))?\$?(?P<body>{_BODY})")
# has_answer_format accepts only a lone number (plus "$", spaces, a trailing period) in the tag.
_LONE_NUMBER = re.compile(rf"\s*[-−]?\$?(?:{_BODY})\.?\s*")

OPEN, CLOSE = "<answer>", "</answer>"


def _to_float(sign: str | None, body: str) -> float:
    if "." in body and "," in body and body.rindex(",") > body.rindex("."):
        body = body.replace(".", "").replace(",", ".")  # "1.234,5"
    elif body.count(".") >= 2:
        body = body.replace(".", "")  # Spanish thousands dots, only when unambiguous
    elif re.fullmatch(r"\d+,\d+", body) and not re.fullmatch(r"[1-9]\d{0,2}(?:,\d{3})+", body):
        body = body.replace(",", ".")  # decimal comma
    else:
        body = body.replace(",", "")  # thousands commas (or none)
    value = float(body)
    return -value if sign else value


def _last_number(text: str) -> float | None:
    # Walk the matches instead of building a list: long generations stay cheap.
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return None if last is None else _to_float(last["sign"], last["body"])


def answer_span(text: str) -> str | None:
    """Content of the last `<answer>` tag, up to its `</answer>` or, when the generation was cut
    off before closing it, to the end of the text. None when there is no `<answer>` at all."""
    start = text.rfind(OPEN)
    if start < 0:
        return None
    content = text[start + len(OPEN) :]
    end = content.find(CLOSE)
    return content if end < 0 else content[:end]


_SPACE_GROUP = re.compile(r"(?<=\d)[ \u00a0\u202f](?=\d{3}(?!\d))")
_FRACTION = re.compile(r"\s*(?P<sign>[-−])?(?P<num>\d+)\s*/\s*(?P<den>\d+)\.?\s*")


def _tag_content(span: str) -> str:
    """An answer tag's content with space-grouped thousands joined ("1 234" -> "1234")."""
    return _SPACE_GROUP.sub("", span)


def extract_answer(text: str) -> float | None:
    """The predicted number: the last number inside the last `<answer>` tag when there is one (a
    tag with no number gives None, with no fall back to the text: the model committed to an
    answer and it is not a number), otherwise the last number anywhere in the text."""
    span = answer_span(text)
    if span is None:
        return _last_number(text)
    span = _tag_content(span)
    if frac := _FRACTION.fullmatch(span):
        if not int(frac["den"]):
            return None  # "n/0" is not a number
        value = int(frac["num"]) / int(frac["den"])
        return -value if frac["sign"] else value
    return _last_number(span)


def is_correct(predicted: float | None, expected: float, tol: float = 1e-6) -> bool:
    """`predicted` equals `expected` within `tol`, relative for large values, absolute near 0."""
    if predicted is None or not math.isfinite(predicted):
        return False
    return math.isclose(predicted, expected, rel_tol=tol, abs_tol=tol)


def has_answer_format(text: str) -> bool:
    """Exactly one `<answer>N</answer>` with a lone number N; a `<think>` block before it, or any
    other text outside the tag, is fine. Stray or extra answer tags make it False."""
    if text.count(OPEN) != 1 or text.count(CLOSE) != 1:
        return False
    start, end = text.index(OPEN), text.index(CLOSE)
    content = _tag_content(text[start + len(OPEN) : end])
    return start < end and (_LONE_NUMBER.fullmatch(content) is not None or _FRACTION.fullmatch(content) is not None)


def format_number(value: float) -> str:
    """Integral values without ".0" ("68", not "68.0"); others in shortest repr ("3.5")."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def has_reasoning_format(text: str) -> bool:
    """The reasoning format the post-training rewards ask for, the whole reply:
    `<think>...</think><answer>N</answer>` (whitespace around the parts allowed)."""
    text = text.strip()
    if not text.startswith("<think>") or text.count("<think>") != 1 or text.count("</think>") != 1:
        return False
    close = text.index("</think>")
    rest = text[close + len("</think>"):].strip()
    return rest.startswith(OPEN) and rest.endswith(CLOSE) and has_answer_format(rest)
