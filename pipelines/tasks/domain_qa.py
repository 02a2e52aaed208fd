"""Question-answer pairs from the user's own documents (no torch, no Dagster).

A section is a heading line and the lines after it up to the next heading; its pair asks,
in the corpus' language (the pack's `qa.toml`), a question made from the heading's shape
(an action, a noun phrase) and answers with the section's prose, cut at a paragraph
boundary. A man page also gives "what does it do?", and a conversation (a support ticket)
one pair in its own words: its first turn and the main answerer's first reply. Records
are the SFT jsonl format with provenance: {"messages": [...], "doc_id", "shard",
"heading"}. The rules: docs/post-training.md#instruction-data-from-your-documents.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise

from pipelines.tasks import packs


@dataclass(frozen=True)
class QAOptions:
    max_chars: int = 900  # answer length cap, cut at a paragraph boundary
    max_paragraphs: int = 4
    min_chars: int = 120  # shorter sections are skipped
    max_heading_words: int = 12
    max_code_fraction: float = 0.5  # sections with more code / option / list lines are skipped


TERMINAL = ".,;:!?…»\"')]>=*/\\|"
MAN_HEADER = re.compile(r"^(\S+)\((\d\w*)\)\s.*\S+\(\d\w*\)$")
MAN_NAME = re.compile(r"^([\w.+:,\- ]{1,60}?)\s+[-—–]\s+(.+)$")
NAVIGATION = ("[ <", "<<")  # generated HTML help's links, in every language
# A turn of a conversation: a speaker's name (one or two capitalised words) and a colon.
TURN = re.compile(r"^([A-ZÀ-Þ][\w.]{1,19}(?: [\w.]{1,19})?): (\S.*)$")


def _alternatives(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in words)


@dataclass(frozen=True)
class Grammar:
    """A language's qa.toml, ready to use: the words and patterns the shapes are read with."""
    language: str
    how: tuple[str, ...]
    about: tuple[str, ...]
    what: tuple[str, ...]
    question_open: str
    question_mark: str
    context_words: int
    context: str
    context_markers: tuple[str, ...]
    purpose: tuple[tuple[str, ...], ...]
    connectors: frozenset[str]
    describes: frozenset[str]
    skip: frozenset[str]
    foreign: frozenset[str]
    own: frozenset[str]
    navigation: tuple[str, ...]
    navigation_links: tuple[str, ...]
    numbered: re.Pattern
    caption: re.Pattern
    name_before: str  # a regex class: a lower-case letter or a comma
    infinitive_min: int
    infinitive_ending: re.Pattern | None
    infinitives: frozenset[str]
    not_infinitive: frozenset[str]
    not_endings: tuple[str, ...]
    forms: tuple[tuple[str, str], ...]


@functools.cache
def grammar(language: str = "es") -> Grammar:
    """The QA grammar of `language` (MissingText when its pack has no qa.toml)."""
    raw = packs.texts(language, packs.QA)
    inf, head, ans = raw["infinitive"], raw["headings"], raw["answers"]
    numbered = _alternatives(head["numbered"])
    ending = None
    if inf["endings"]:
        clitics = f"(?:{_alternatives(inf['clitics'])})?" if inf["clitics"] else ""
        ending = re.compile(f"(?:{_alternatives(inf['endings'])}){clitics}$")
    return Grammar(
        language=language, how=tuple(raw["how"]), about=tuple(raw["about"]), what=tuple(raw["what"]),
        question_open=raw["question_open"], question_mark=raw["question_mark"],
        context_words=raw["context_words"], context=raw["context"], context_markers=tuple(raw["context_markers"]),
        purpose=tuple(tuple(p.split()) for p in raw["purpose"]),
        connectors=frozenset(head["connectors"]), describes=frozenset(head["describes"]),
        skip=frozenset(head["skip"]), foreign=frozenset(ans["foreign"]), own=frozenset(ans["own"]),
        navigation=(*NAVIGATION, *ans["navigation"]), navigation_links=tuple(ans["navigation_links"]),
        numbered=re.compile((f"^(?:(?:{numbered})\\s+)?" if numbered else "^")
                            + r"(?:\d+|[A-Z])(?:\.\d+)*\.?\s+(?=\S)", re.IGNORECASE),
        caption=re.compile(f"^(?:{_alternatives(head['captions'])})\\s+\\d", re.IGNORECASE) if head["captions"]
        else re.compile(r"(?!)"),
        name_before=f"[{re.escape(raw['lowercase'])},]",
        infinitive_min=inf["min_length"], infinitive_ending=ending, infinitives=frozenset(inf["words"]),
        not_infinitive=frozenset(inf["not"]), not_endings=tuple(inf["not_endings"]),
        forms=tuple((a, b) for a, b in inf["forms"]),
    )


def _pick(templates: tuple[str, ...], *key: str) -> str:
    h = int.from_bytes(hashlib.sha256("\x1f".join(key).encode()).digest()[:8], "big")
    return templates[h % len(templates)]


def _words(line: str) -> list[str]:
    return re.findall(r"\w+", line.lower())


def strip_number(line: str, language: str = "es") -> str:
    numbered = grammar(language).numbered
    return numbered.sub("", line, count=1).strip() if numbered.match(line) else line.strip()


def _is_question(line: str, g: Grammar) -> bool:
    return line.startswith(g.question_open) and line.endswith("?")


def is_heading(line: str, max_words: int = 12, language: str = "es") -> bool:
    """The shape of a heading line (whether a body follows is the caller's check)."""
    g = grammar(language)
    line = line.strip()
    if _is_question(line, g):
        return 2 <= len(line.split()) <= max_words
    if not line or g.caption.match(line) or line[-1] in TERMINAL or any(c in line for c in "=▸/|<>{}") \
            or "  " in line:
        return False
    text = strip_number(line, language)
    words = text.split()
    if ". " in text or words and words[0].lower() in g.describes:
        return False  # a sentence, or a help text's description ("Muestra las opciones ...")
    if not 1 <= len(words) <= max_words or len(text) > 100 or not (text[0].isupper() or text[0].isdigit()):
        return False
    letters = sum(c.isalpha() for c in text)
    if letters < 0.75 * len(text.replace(" ", "")) or letters < 3:
        return False  # "ARG1 <= ARG2", table rows, code
    return words[-1].lower() not in g.connectors


def _looks_foreign(paragraph: str, g: Grammar) -> bool:
    w = _words(paragraph)
    return sum(x in g.foreign for x in w) > max(2, sum(x in g.own for x in w))


def _is_code(line: str) -> bool:
    s = line.strip()
    if s.startswith(("$", "#", "-", "•", "%", "\\", "{", "}", "<")) or "\t" in line:
        return True
    symbols = sum(c in "{}[]()<>=;\\/|_$#" for c in s)
    return symbols > 0.08 * len(s) or (len(s.split()) <= 3 and not s.endswith((".", ":")))


def _is_navigation(line: str, g: Grammar) -> bool:
    s = line.strip()
    return s.startswith(g.navigation) or (s.startswith("[") and any(w in s for w in g.navigation_links))


def is_wrapped_heading(line: str, max_words: int = 12, language: str = "es") -> bool:
    """A heading in hard-wrapped text: all capitals ("FORMATO DE ENTRADA") or numbered."""
    s = line.strip()
    return is_heading(s, max_words, language) and (s.isupper() or strip_number(s, language) != s)


def hard_wrapped(lines: list[str]) -> bool:
    """Text wrapped at a fixed width (man pages, fortunes): many lines go on in lower case."""
    goes_on = sum(1 for a, b in pairwise(lines) if b.strip()[:1].islower() and a.strip()[-1:] not in ".:!?")
    return len(lines) > 2 and goes_on >= 0.25 * (len(lines) - 1)


def reflow(lines: list[str], language: str = "es") -> list[str]:
    """Hard-wrapped text back into paragraphs: a line joins the previous one unless the
    previous ended a sentence or was a heading, or this one starts an option, a list item
    or a heading."""
    out: list[str] = []
    heading = True
    for line in lines:
        s = line.strip()
        if out and not heading and not out[-1].endswith((".", ":", "!", "?")) \
                and not s.startswith(("-", "•", "*")) and not is_wrapped_heading(s, language=language):
            out[-1] = f"{out[-1]} {s}"
        else:
            out.append(s)
            heading = is_wrapped_heading(s, language=language)
    return out


def answer_text(body: list[str], opts: QAOptions, language: str = "es") -> str | None:
    """The section's prose, cut at a paragraph boundary; None if not worth a pair."""
    g = grammar(language)
    lines = [x.strip() for x in body if x.strip() and not _is_navigation(x, g)]
    if not lines or sum(map(_is_code, lines)) > opts.max_code_fraction * len(lines):
        return None
    paragraphs = [x for x in lines if not _looks_foreign(x, g)]
    kept: list[str] = []
    for p in paragraphs:
        if kept and (len(kept) >= opts.max_paragraphs or len("\n".join([*kept, p])) > opts.max_chars):
            break
        kept.append(p)
    if kept and len(kept[0]) > opts.max_chars:  # one long paragraph: cut at its last sentence end that fits
        cut = kept[0][:opts.max_chars].rfind(". ")
        kept = [kept[0][:cut + 1]] if cut > opts.min_chars else []
    text = "\n".join(kept)
    if len(text) < opts.min_chars or not any(p.endswith((".", ":", "!", "?")) for p in kept):
        return None
    return text


def _topic(heading: str, body: str, g: Grammar) -> str:
    """The heading as a phrase inside a sentence: its first letter lowered unless it is a
    name (all caps, inner capitals, or written capitalised mid-sentence in the body)."""
    if heading.isupper():
        heading = heading.capitalize()
    first = heading.split()[0]
    name = (first[1:] != first[1:].lower()
            or re.search(g.name_before + " " + re.escape(first) + r"\b", body))
    return heading if name else heading[0].lower() + heading[1:]


def infinitive(word: str, language: str = "es") -> str | None:
    """The infinitive `word` is or stands for ("Configurar" -> "configurar", "Configuring"
    -> "configure"), None when it is none: one of the pack's verbs, a word with an infinitive's
    ending (and none of the endings of the nouns that look like one), or another form of one
    of its verbs (qa.toml's [infinitive])."""
    g = grammar(language)
    w = word.lower()
    if len(w) < g.infinitive_min or w in g.not_infinitive or not w.isalpha() or word[1:] != word[1:].lower():
        return None
    if _by_ending(w, g):
        return w
    for suffix, replacement in g.forms:
        if w.endswith(suffix) and _by_ending(base := w[: len(w) - len(suffix)] + replacement, g):
            return base
    return None


def _by_ending(w: str, g: Grammar) -> bool:
    """Is the lower-case word `w` one of the pack's verbs, or an infinitive by its ending?"""
    if w in g.infinitives:
        return True
    return (g.infinitive_ending is not None and w not in g.not_infinitive and not w.endswith(g.not_endings)
            and g.infinitive_ending.search(w) is not None)


def question_for(heading: str, title: str, doc_id: str, body: str = "", language: str = "es") -> str:
    g = grammar(language)
    heading = re.sub(r"\s+", " ", heading).strip()
    if heading.startswith(g.question_open) and (g.question_open or heading.endswith("?")):
        return re.sub(r"\s*\?$", lambda _: g.question_mark, heading)
    words = heading.split()
    for purpose in g.purpose:  # "Para definir un estilo": the action is "definir un estilo"
        n = len(purpose)
        if tuple(words[:n]) == purpose and len(words) > n and infinitive(words[n], language):
            heading = " ".join(words[n:])
            break
    x = _topic(heading, body, g)
    if len(heading.split()) <= g.context_words and not any(m in heading for m in g.context_markers) \
            and title and title.lower() not in heading.lower():
        x = g.context.format(x=x, title=title)
    first = heading.split()[0]
    if verb := infinitive(first, language):
        x = x[0].lower() + x[1:]
        if verb != first.lower():  # another form of the verb ("Configuring"): the infinitive
            x = verb + x[len(first):]
        return _pick(g.how, doc_id, heading).format(x=x)
    return _pick(g.about, doc_id, heading).format(x=x)


def short_title(line: str, language: str = "es") -> str:
    t = re.sub(r"\s*\(.*?\)\s*", " ", strip_number(line, language)).strip().rstrip(".")
    return t if 0 < len(t.split()) <= 6 and is_heading(t, language=language) else ""


def _record(question: str, answer: str, doc_id: str, shard: str, heading: str) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
            "doc_id": doc_id, "shard": shard, "heading": heading}


def _man_pairs(lines: list[str], doc_id: str, shard: str, opts: QAOptions,
               language: str) -> tuple[list[dict], list[str], str]:
    """The man page's "what does it do" pair, the rest of its lines (re-flowed), its name."""
    m = MAN_NAME.match(lines[1]) if len(lines) > 1 else None
    if not m:
        return [], reflow(lines[1:], language), ""
    name, what = m.group(1).split(",")[0].strip(), m.group(2).strip().rstrip(".")
    body = lines[2:]
    while body and body[0].split()[0] == name:  # the synopsis
        body = body[1:]
    rest = reflow(body, language)
    first = next((i for i, x in enumerate(rest) if is_heading(x, opts.max_heading_words, language)), len(rest))
    intro = rest[:first]
    answer = answer_text([f"{name}: {what}.", *intro], opts, language)
    what_q = _pick(grammar(language).what, doc_id, name).format(x=name)
    pairs = [_record(what_q, answer, doc_id, shard, name)] if answer else []
    return pairs, rest[first:], name


def sections(lines: list[str], max_words: int = 12, wrapped: bool = False,
             language: str = "es") -> Iterator[tuple[str, list[str]]]:
    """(heading, body lines) for each heading followed by at least one body line (that
    does not go on in lower case, as the rest of a wrapped sentence would)."""
    test = is_wrapped_heading if wrapped else is_heading
    heads = [i for i, x in enumerate(lines) if test(x, max_words, language)
             and not (i + 1 < len(lines) and lines[i + 1].strip()[:1].islower())]
    for n, i in enumerate(heads):
        end = heads[n + 1] if n + 1 < len(heads) else len(lines)
        if end > i + 1:
            yield lines[i].strip(), lines[i + 1:end]


def document_pairs(doc_id: str, shard: str, text: str, opts: QAOptions = QAOptions(),
                   language: str = "es") -> list[dict]:
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    # a title repeated on the next line (aptitude, debian-reference) counts once
    lines = [x for i, x in enumerate(lines) if i == 0 or x.strip() != lines[i - 1].strip()]
    if not lines:
        return []
    if (turns := conversation(lines)) is not None:
        pair = conversation_pair(turns, opts)
        return [_record(*pair, doc_id, shard, lines[0].strip())] if pair else []
    pairs: list[dict] = []
    title = ""
    wrapped = hard_wrapped(lines)
    if MAN_HEADER.match(lines[0].strip()):
        pairs, lines, title = _man_pairs(lines, doc_id, shard, opts, language)
        wrapped = True
    elif wrapped:
        lines = reflow(lines, language)
    elif len(lines[0].split()) <= opts.max_heading_words:
        title = short_title(lines[0].strip().rstrip("."), language)
        if lines[0].strip().endswith(".") and not is_heading(lines[0], language=language):
            lines[0] = lines[0].strip().rstrip(".")  # "Búsquedas y versiones." is a title
    skip = grammar(language).skip
    for raw, body in sections(lines, opts.max_heading_words, wrapped, language):
        heading = strip_number(raw, language)
        answer = None if heading.lower() in skip else answer_text(body, opts, language)
        if answer is None:
            continue
        same_title = title and heading.lower().startswith(title.lower())
        q = question_for(heading, "" if same_title else title, doc_id, answer, language)
        pairs.append(_record(q, answer, doc_id, shard, heading))
    return pairs


def conversation(lines: list[str]) -> list[tuple[str, str]] | None:
    """(speaker, text) per turn when the lines after the first (the subject) are turns, a
    line without a speaker going on with the turn before it; None for anything else. Two
    or three speakers, who take turns: a note of labelled findings ("EF: ...", "Dx: ...",
    "Tto: ...") has more labels and none of them speaks twice apart."""
    turns: list[tuple[str, list[str]]] = []
    for line in lines[1:]:
        if m := TURN.match(line.strip()):
            turns.append((m.group(1), [m.group(2)]))
        elif turns:
            turns[-1][1].append(line.strip())
        else:
            return None  # the body does not open with a turn
    speakers = [who for who, _ in turns]
    labelled = len(turns) / max(len(lines) - 1, 1)
    if len(turns) < 2 or not 2 <= len(set(speakers)) <= 3 or labelled < 0.5:
        return None
    if len(set(speakers)) == len(speakers) > 2:  # three labels, one line each: not a dialogue
        return None
    return [(who, "\n".join(text)) for who, text in turns]


def conversation_pair(turns: list[tuple[str, str]], opts: QAOptions) -> tuple[str, str] | None:
    """(question, answer): the first turn, and the first reply after it by the speaker
    who answers most (not a one-off "Sistema: ticket reasignado"); None when that reply
    is shorter than `opts.min_chars` or there is none."""
    asker = turns[0][0]
    others = Counter(who for who, _ in turns if who != asker)
    if not others:
        return None
    answerer = others.most_common(1)[0][0]
    reply = next((text for who, text in turns[1:] if who == answerer), "")
    if len(reply) > opts.max_chars:  # cut at the last sentence end that fits
        reply = reply[: reply[: opts.max_chars].rfind(". ") + 1]
    if len(reply) < opts.min_chars:
        return None
    return turns[0][1], reply


def build_pairs(documents: Iterable[dict], opts: QAOptions = QAOptions(), language: str = "es") -> list[dict]:
    """Pairs from documents ({"doc_id", "shard", "text"}) in `language`, an answer used once
    only (the boilerplate sections repeated across documents keep their first)."""
    seen: set[str] = set()
    out = []
    for d in documents:
        for p in document_pairs(d["doc_id"], d.get("shard", ""), d["text"], opts, language):
            key = hashlib.sha1(re.sub(r"\s+", " ", p["messages"][1]["content"].lower()).encode()).hexdigest()
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out
