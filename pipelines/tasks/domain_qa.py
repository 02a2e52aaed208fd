"""Question-answer pairs from the user's own documents (no torch, no Dagster).

A document as the data stages keep it has one paragraph / heading / list item per line.
A section is a heading line and the lines after it up to the next heading; its pair is a
Spanish question made from the heading and the section's text as the answer:

    heading   a short line (<= 12 words) with no terminal punctuation, starting with a capital
              or a number ("3.2. Configurar la red", "Capítulo 4. Redes" lose the number),
              an all-caps man-page section ("FORMATO DE ENTRADA"), or a question
              ("¿Qué es Transmission?"); it counts only if a body paragraph follows
    question  by the heading's shape: an infinitive ("Configurar la red") -> "¿Cómo puedo
              configurar la red?" and kin; a noun phrase -> "Háblame de ...", "¿Qué hay que
              saber sobre ...?" and kin; short headings get the document's title as context
              ("... en FreedomBox"). The template is picked by a hash of the doc_id and the
              heading: deterministic, and varied across documents
    answer    the section's prose paragraphs (navigation lines and English paragraphs
              dropped), cut at a paragraph boundary to `max_chars` / `max_paragraphs`;
              sections that are too short, mostly code / option / list lines, or an answer
              already used are skipped

A man page ("MEV(1) ... MEV(1)", then "mev - description") also gives "¿Qué hace mev?"
answered by its name line and first description paragraphs (its hard-wrapped lines are
re-joined into paragraphs first).

Records are the SFT jsonl format (pipelines.tasks.post_data) with provenance alongside:
{"messages": [{"role": "user", ...}, {"role": "assistant", ...}], "doc_id", "shard", "heading"}.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True)
class QAOptions:
    max_chars: int = 900  # answer length cap, cut at a paragraph boundary
    max_paragraphs: int = 4
    min_chars: int = 120  # shorter sections are skipped
    max_heading_words: int = 12
    max_code_fraction: float = 0.5  # sections with more code / option / list lines are skipped


TERMINAL = ".,;:!?…»\"')]>=*/\\|"
NUMBERED = re.compile(r"^(?:(?:cap[ií]tulo|secci[oó]n|ap[eé]ndice|parte|lecci[oó]n)\s+)?"
                      r"(?:\d+|[A-Z])(?:\.\d+)*\.?\s+(?=\S)", re.IGNORECASE)
CAPTION = re.compile(r"^(?:tabla|figura|ejemplo|ejemplos|nota|aviso|importante|sugerencia)\s+\d", re.IGNORECASE)
MAN_HEADER = re.compile(r"^(\S+)\((\d\w*)\)\s.*\S+\(\d\w*\)$")
MAN_NAME = re.compile(r"^([\w.+:,\- ]{1,60}?)\s+[-—–]\s+(.+)$")
# last words that mark a wrapped fragment, not a heading
CONNECTORS = {"de", "del", "la", "el", "los", "las", "un", "una", "y", "o", "e", "u", "en", "a", "al", "con",
              "por", "para", "que", "se", "su", "sus", "como", "sin", "sobre", "entre", "si", "no", "lo", "le"}
NOT_INFINITIVE = {"lugar", "hogar", "mar", "par", "bar", "poder", "placer", "taller", "alquiler", "primer",
                  "tercer", "cualquier", "ayer", "mujer", "carácter", "car", "super", "master", "router", "server",
                  "manager", "player", "filter", "header", "footer", "buffer", "docker", "computer", "user",
                  "folder", "viewer", "writer", "reader", "loader", "driver", "editor", "error", "color", "valor",
                  "menor", "mayor", "anterior", "posterior", "interior", "exterior", "superior", "inferior"}
EN_WORDS = {"the", "and", "of", "to", "is", "are", "with", "this", "that", "for", "you", "it", "be", "which"}
ES_WORDS = {"de", "la", "el", "que", "en", "los", "las", "del", "se", "para", "una", "por", "con", "es", "y"}
DESCRIBES = {"muestra", "calcula", "devuelve", "especifica", "inserta", "permite", "abre", "define", "establece",
             "indica", "crea", "elimina", "selecciona", "añade", "activa", "desactiva", "convierte", "cambia",
             "determina", "contiene", "vaya", "elija", "seleccione", "pulse", "haga", "escriba", "introduzca",
             "asigna", "aplica", "borra", "copia", "guarda", "ajusta", "oculta", "agrega", "este", "esta", "estos", "si"}
# sections that are boilerplate, not knowledge
SKIP = {"informar de errores", "véase también", "vea también", "autor", "autores", "copyright", "colofón",
        "derechos de autor", "traducción", "historial", "licencia"}
GENERIC_WORDS = 3  # headings this short get the document's title as context

HOW = ("¿Cómo puedo {x}?", "¿Cómo se puede {x}?", "Explícame cómo {x}.", "¿Qué pasos hay que seguir para {x}?",
       "Quiero {x}. ¿Cómo lo hago?", "¿De qué manera puedo {x}?")
ABOUT = ("Háblame de {x}.", "¿Qué hay que saber sobre {x}?", "¿Qué me puedes contar sobre {x}?",
         "Explícame lo relativo a {x}.", "¿Qué dice la documentación sobre {x}?", "Necesito información sobre {x}.")
WHAT = ("¿Qué hace {x}?", "¿Para qué sirve {x}?", "¿Qué es {x}?", "Explícame qué hace {x}.")


def _pick(templates: tuple[str, ...], *key: str) -> str:
    h = int.from_bytes(hashlib.sha256("\x1f".join(key).encode()).digest()[:8], "big")
    return templates[h % len(templates)]


def _words(line: str) -> list[str]:
    return re.findall(r"[\wáéíóúüñÁÉÍÓÚÜÑ]+", line.lower())


def strip_number(line: str) -> str:
    return NUMBERED.sub("", line, count=1).strip() if NUMBERED.match(line) else line.strip()


def is_heading(line: str, max_words: int = 12) -> bool:
    """The shape of a heading line (whether a body follows is the caller's check)."""
    line = line.strip()
    if line.startswith("¿") and line.endswith("?"):
        return 2 <= len(line.split()) <= max_words
    if not line or CAPTION.match(line) or line[-1] in TERMINAL or any(c in line for c in "=▸/|<>{}") \
            or "  " in line:
        return False
    text = strip_number(line)
    words = text.split()
    if ". " in text or words and words[0].lower() in DESCRIBES:
        return False  # a sentence, or a help text's description ("Muestra las opciones ...")
    if not 1 <= len(words) <= max_words or len(text) > 100 or not (text[0].isupper() or text[0].isdigit()):
        return False
    letters = sum(c.isalpha() for c in text)
    if letters < 0.75 * len(text.replace(" ", "")) or letters < 3:
        return False  # "ARG1 <= ARG2", table rows, code
    return words[-1].lower() not in CONNECTORS


def _looks_english(paragraph: str) -> bool:
    w = _words(paragraph)
    return sum(x in EN_WORDS for x in w) > max(2, sum(x in ES_WORDS for x in w))


def _is_code(line: str) -> bool:
    s = line.strip()
    if s.startswith(("$", "#", "-", "•", "%", "\\", "{", "}", "<")) or "\t" in line:
        return True
    symbols = sum(c in "{}[]()<>=;\\/|_$#" for c in s)
    return symbols > 0.08 * len(s) or (len(s.split()) <= 3 and not s.endswith((".", ":")))


def _is_navigation(line: str) -> bool:
    s = line.strip()
    return s.startswith(("[ <", "<<", "[ Subir", "[ Arriba")) or ("Subir :" in s and s.startswith("["))


def is_wrapped_heading(line: str, max_words: int = 12) -> bool:
    """A heading in hard-wrapped text: all capitals ("FORMATO DE ENTRADA") or numbered."""
    s = line.strip()
    return is_heading(s, max_words) and (s.isupper() or strip_number(s) != s)


def hard_wrapped(lines: list[str]) -> bool:
    """Text wrapped at a fixed width (man pages, fortunes): many lines go on in lower case."""
    goes_on = sum(1 for a, b in pairwise(lines) if b.strip()[:1].islower() and a.strip()[-1:] not in ".:!?")
    return len(lines) > 2 and goes_on >= 0.25 * (len(lines) - 1)


def reflow(lines: list[str]) -> list[str]:
    """Hard-wrapped text back into paragraphs: a line joins the previous one unless the
    previous ended a sentence or was a heading, or this one starts an option, a list item
    or a heading."""
    out: list[str] = []
    heading = True
    for line in lines:
        s = line.strip()
        if out and not heading and not out[-1].endswith((".", ":", "!", "?")) \
                and not s.startswith(("-", "•", "*")) and not is_wrapped_heading(s):
            out[-1] = f"{out[-1]} {s}"
        else:
            out.append(s)
            heading = is_wrapped_heading(s)
    return out


def answer_text(body: list[str], opts: QAOptions) -> str | None:
    """The section's prose, cut at a paragraph boundary; None if not worth a pair."""
    lines = [x.strip() for x in body if x.strip() and not _is_navigation(x)]
    if not lines or sum(map(_is_code, lines)) > opts.max_code_fraction * len(lines):
        return None
    paragraphs = [x for x in lines if not _looks_english(x)]
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


def _topic(heading: str, body: str) -> str:
    """The heading as a phrase inside a sentence: its first letter lowered unless it is a
    name (all caps, inner capitals, or written capitalised mid-sentence in the body)."""
    if heading.isupper():
        heading = heading.capitalize()
    first = heading.split()[0]
    name = (first[1:] != first[1:].lower()
            or re.search(r"[a-záéíóúñ,] " + re.escape(first) + r"\b", body))
    return heading if name else heading[0].lower() + heading[1:]


def _is_infinitive(word: str) -> bool:
    w = word.lower()
    return (len(w) >= 4 and w not in NOT_INFINITIVE and w.isalpha() and word[1:] == word[1:].lower()
            and re.search(r"(ar|er|ir|ír)(se|lo|la|los|las|le|les)?$", w) is not None)


def question_for(heading: str, title: str, doc_id: str, body: str = "") -> str:
    heading = re.sub(r"\s+", " ", heading).strip()
    if heading.startswith("¿"):
        return re.sub(r"\s+\?$", "?", heading)
    words = heading.split()
    if words[0] == "Para" and len(words) > 1 and _is_infinitive(words[1]):  # "Para definir un estilo"
        heading = " ".join(words[1:])
    x = _topic(heading, body)
    if len(heading.split()) <= GENERIC_WORDS and " en " not in heading and title and title.lower() not in heading.lower():
        x = f"{x} en {title}"
    if _is_infinitive(heading.split()[0]):
        return _pick(HOW, doc_id, heading).format(x=x[0].lower() + x[1:])
    return _pick(ABOUT, doc_id, heading).format(x=x)


def short_title(line: str) -> str:
    t = re.sub(r"\s*\(.*?\)\s*", " ", strip_number(line)).strip().rstrip(".")
    return t if 0 < len(t.split()) <= 6 and is_heading(t) else ""


def _record(question: str, answer: str, doc_id: str, shard: str, heading: str) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
            "doc_id": doc_id, "shard": shard, "heading": heading}


def _man_pairs(lines: list[str], doc_id: str, shard: str, opts: QAOptions) -> tuple[list[dict], list[str], str]:
    """The man page's "what does it do" pair, the rest of its lines (re-flowed), its name."""
    m = MAN_NAME.match(lines[1]) if len(lines) > 1 else None
    if not m:
        return [], reflow(lines[1:]), ""
    name, what = m.group(1).split(",")[0].strip(), m.group(2).strip().rstrip(".")
    body = lines[2:]
    while body and body[0].split()[0] == name:  # the synopsis
        body = body[1:]
    rest = reflow(body)
    first = next((i for i, x in enumerate(rest) if is_heading(x, opts.max_heading_words)), len(rest))
    intro = rest[:first]
    answer = answer_text([f"{name}: {what}.", *intro], opts)
    pairs = [_record(_pick(WHAT, doc_id, name).format(x=name), answer, doc_id, shard, name)] if answer else []
    return pairs, rest[first:], name


def sections(lines: list[str], max_words: int = 12, wrapped: bool = False) -> Iterator[tuple[str, list[str]]]:
    """(heading, body lines) for each heading followed by at least one body line (that
    does not go on in lower case, as the rest of a wrapped sentence would)."""
    test = is_wrapped_heading if wrapped else is_heading
    heads = [i for i, x in enumerate(lines) if test(x, max_words)
             and not (i + 1 < len(lines) and lines[i + 1].strip()[:1].islower())]
    for n, i in enumerate(heads):
        end = heads[n + 1] if n + 1 < len(heads) else len(lines)
        if end > i + 1:
            yield lines[i].strip(), lines[i + 1:end]


def document_pairs(doc_id: str, shard: str, text: str, opts: QAOptions = QAOptions()) -> list[dict]:
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    # a title repeated on the next line (aptitude, debian-reference) counts once
    lines = [x for i, x in enumerate(lines) if i == 0 or x.strip() != lines[i - 1].strip()]
    if not lines:
        return []
    pairs: list[dict] = []
    title = ""
    wrapped = hard_wrapped(lines)
    if MAN_HEADER.match(lines[0].strip()):
        pairs, lines, title = _man_pairs(lines, doc_id, shard, opts)
        wrapped = True
    elif wrapped:
        lines = reflow(lines)
    elif len(lines[0].split()) <= opts.max_heading_words:
        title = short_title(lines[0].strip().rstrip("."))
        if lines[0].strip().endswith(".") and not is_heading(lines[0]):
            lines[0] = lines[0].strip().rstrip(".")  # "Búsquedas y versiones." is a title
    for raw, body in sections(lines, opts.max_heading_words, wrapped):
        heading = strip_number(raw)
        answer = None if heading.lower() in SKIP else answer_text(body, opts)
        if answer is None:
            continue
        same_title = title and heading.lower().startswith(title.lower())
        q = question_for(heading, "" if same_title else title, doc_id, answer)
        pairs.append(_record(q, answer, doc_id, shard, heading))
    return pairs


def build_pairs(documents: Iterable[dict], opts: QAOptions = QAOptions()) -> list[dict]:
    """Pairs from documents ({"doc_id", "shard", "text"}), an answer used once only (the
    boilerplate sections repeated across documents keep their first)."""
    seen: set[str] = set()
    out = []
    for d in documents:
        for p in document_pairs(d["doc_id"], d.get("shard", ""), d["text"], opts):
            key = hashlib.sha1(re.sub(r"\s+", " ", p["messages"][1]["content"].lower()).encode()).hexdigest()
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out
