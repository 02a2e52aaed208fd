"""Records: a jsonl line or a csv / tsv row is one document, its text made from the
record's fields as `ReaderConfig` maps them.

The mapping (the `text_fields`, then the turns under `turns_field`, each a paragraph
"Role: text") is the same for both formats, so a ticket export reads alike as jsonl or
csv; with the defaults a record's `text` is its document, unchanged. Every problem is the
record's alone: one Rejection naming the file, the record and the reason, and the records
around it are read. docs/data.md#records-jsonl-and-csv.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pipelines.config import ReaderConfig
from pipelines.data.documents import Document, Rejection
from pipelines.data.readers.common import FileContext, text_record
from pipelines.data.readers.decoding import BadBytes, check_binary_bytes, iter_lines

_ABSENT = object()
# Undecodable bytes, kept through decoding by errors="surrogateescape" so that csv parsing
# goes on and the rejection can name the row and the byte.
_ESCAPED = re.compile("[\udc80-\udcff]")
_SEPARATORS = (",", ";", "\t")


class RecordProblem(Exception):
    """A record that cannot become a document: `reason` is a read rejection code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# --- the mapping ---------------------------------------------------------------------


def lookup(record: Mapping[str, Any], key: str) -> Any:
    """record[key]; a dotted key walks into nested objects ("ticket.subject") when the
    record has no key of that literal name. `_ABSENT` when there is none."""
    if key in record:
        return record[key]
    if "." not in key:
        return _ABSENT
    node: Any = record
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def record_text(record: Mapping[str, Any], cfg: ReaderConfig, cells: bool = False) -> str:
    """The document text of one record, or RecordProblem. `cells`: the values are csv
    cells (strings), so a turns cell holding a JSON array is decoded first."""
    parts: list[str] = []
    missing: list[str] = []
    for key in cfg.text_fields:
        value = lookup(record, key)
        if value is _ABSENT or value is None:
            missing.append(key)
        elif not isinstance(value, str):
            raise RecordProblem(
                "non_string_text", f"{key!r} is a {type(value).__name__}, expected a string"
            )
        else:
            parts.append(value)
    if cfg.turns_field is not None:
        value = lookup(record, cfg.turns_field)
        if value is _ABSENT or value is None:
            missing.append(cfg.turns_field)
        else:
            parts.append(_turns(value, cfg, cells))
    if len(missing) == len(cfg.text_fields) + (cfg.turns_field is not None):
        raise RecordProblem("missing_text_field", _missing(missing, record))
    present = [p for p in parts if p.strip()]
    if len(present) == 1 and len(parts) == 1:
        return present[0]  # one field: its value as written (the default mapping's rule)
    return "\n\n".join(p.strip() for p in present)


def _missing(keys: list[str], record: Mapping[str, Any]) -> str:
    have = sorted(str(k) for k in record)[:20]
    if len(keys) == 1:
        return f"no {keys[0]!r} field (record keys: {have})"
    return f"none of the fields {', '.join(map(repr, keys))} (record keys: {have})"


def _turns(value: Any, cfg: ReaderConfig, cells: bool) -> str:
    key = cfg.turns_field
    if cells and isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value, strict=False)  # a raw line break inside a string
        except ValueError as e:
            raise RecordProblem("malformed_turns", f"{key!r}: not a JSON array: {e}") from e
    if isinstance(value, str):
        return value  # a conversation already written out
    if not isinstance(value, list):
        raise RecordProblem(
            "malformed_turns", f"{key!r} is a {type(value).__name__}, expected a list of turns"
        )
    out = []
    for i, turn in enumerate(value):
        line = _turn(turn, cfg, f"{key}[{i}]")
        if line:
            out.append(line)
    return "\n\n".join(out)


def _turn(turn: Any, cfg: ReaderConfig, where: str) -> str:
    """One turn as "Role: text" ("" for a turn with an empty or null text: an
    attachment or a status change holds no words)."""
    if isinstance(turn, str):
        return turn.strip()
    if not isinstance(turn, Mapping):
        raise RecordProblem(
            "malformed_turns", f"{where} is a {type(turn).__name__}, expected an object or a string"
        )
    text = next((turn[k] for k in cfg.turn_text_keys if k in turn), _ABSENT)
    if text is _ABSENT:
        raise RecordProblem(
            "malformed_turns",
            f"{where} has none of the text keys {cfg.turn_text_keys} (its keys: {sorted(turn)[:20]})",
        )
    if text is None:
        return ""
    if not isinstance(text, str):
        raise RecordProblem(
            "malformed_turns", f"{where}: the text is a {type(text).__name__}, expected a string"
        )
    role = next((turn[k] for k in cfg.turn_role_keys if turn.get(k) not in (None, "")), None)
    text = text.strip()
    if not text or role is None:
        return text
    role = str(role).strip()
    name = cfg.turn_roles.get(role, role[:1].upper() + role[1:])
    return f"{name}: {text}"


def record_document(
    record: Mapping[str, Any], source: str, where: str, f: FileContext,
    content: str | bytes = b"", cells: bool = False,
) -> Document | Rejection:
    try:
        text = record_text(record, f.cfg, cells)
    except RecordProblem as e:
        return f.reject(e.reason, f"{where}: {e.detail}", source, content=content)
    limit = f.cfg.max_document_bytes
    if cells and len(text) * 4 > limit and (n := len(text.encode("utf-8", "surrogatepass"))) > limit:
        # a jsonl line is capped as it streams by; a csv row may span lines
        return f.reject("too_large", f"{where}: {n} bytes, more than max_document_bytes={limit}",
                        source, content=content)
    return text_record(text, source, where, f, content=content if isinstance(content, bytes) else b"")


# --- jsonl ---------------------------------------------------------------------------


def read_jsonl(chunks: Iterator[bytes], f: FileContext) -> Iterator[Document | Rejection]:
    limit, ratio = f.cfg.max_document_bytes, f.cfg.max_control_char_ratio
    records = 0
    for lineno, offset, line, length in iter_lines(chunks, limit):
        f.position = f"line {lineno}"
        source, where = f"{f.rel}#{lineno}", f"{f.rel} line {lineno}"
        if line is None:
            yield f.reject(
                "too_large",
                f"{where}: {length} bytes, more than max_document_bytes={limit}",
                source,
            )
            records += 1
            continue
        if lineno == 1 and line.startswith(codecs.BOM_UTF8):
            line = line[3:]
        if not line.strip():
            continue  # blank lines hold no record
        records += 1
        yield _jsonl_record(line, offset, source, where, ratio, f)
    if not records:
        yield f.reject("empty_file", f"{f.rel}: no records (only blank lines)")


def _jsonl_record(
    line: bytes, offset: int, source: str, where: str, ratio: float, f: FileContext
) -> Document | Rejection:
    try:
        check_binary_bytes(line, ratio)
        s = line.decode("utf-8")
    except BadBytes as e:
        return f.reject(e.reason, f"{where}: {e.detail}", source, content=line)
    except UnicodeDecodeError as e:
        return f.reject(
            "invalid_utf8",
            f"{where}: invalid UTF-8 at byte offset {e.start} "
            f"of the line (offset {offset + e.start} in the file, "
            f"{line[e.start : e.start + 4]!r}): {e.reason}",
            source,
            content=line,
        )
    try:
        record = json.loads(s)
    except ValueError as e:
        return f.reject("malformed_json", f"{where}: invalid JSON: {e}", source, content=line)
    if not isinstance(record, dict):
        return f.reject(
            "malformed_json",
            f"{where}: a JSON {type(record).__name__}, expected an object",
            source,
            content=line,
        )
    return record_document(record, source, where, f, content=line)


# --- csv / tsv -----------------------------------------------------------------------


class _LineTooLong(Exception):
    def __init__(self, lineno: int, length: int) -> None:
        super().__init__(lineno, length)
        self.lineno, self.length = lineno, length


class Lines:
    """The file's lines as text for csv.reader (each with its "\\n", undecodable bytes
    escaped). A line over the size limit raises _LineTooLong out of the reader, which
    then goes on from the next line: an iterator class, not a generator, so that it
    survives raising."""

    def __init__(self, chunks: Iterator[bytes], limit: int) -> None:
        self._lines = iter_lines(chunks, limit)
        self.lineno = 0
        self._back: str | None = None

    def __iter__(self) -> Lines:
        return self

    def unread(self, line: str) -> None:
        """Hand `line` out again next (the header line, once its separator is known)."""
        self._back = line

    def __next__(self) -> str:
        if self._back is not None:
            line, self._back = self._back, None
            return line
        lineno, _offset, line, length = next(self._lines)
        self.lineno = lineno
        if line is None:
            raise _LineTooLong(lineno, length)
        if lineno == 1 and line.startswith(codecs.BOM_UTF8):
            line = line[3:]
        return line.decode("utf-8", "surrogateescape") + "\n"


def _sniff(header_line: str) -> str:
    """The separator a header line uses most, outside quotes ("," when none)."""
    bare = re.sub(r'"[^"]*"', "", header_line)
    counts = [(bare.count(s), -i, s) for i, s in enumerate(_SEPARATORS)]
    best = max(counts)
    return best[2] if best[0] else ","


def read_csv(chunks: Iterator[bytes], f: FileContext) -> Iterator[Document | Rejection]:
    """One document per data row; the first row names the columns. Quoted fields may span
    lines; a row whose field count differs from the header's, whose quoting is broken, or
    whose mapped cells hold invalid UTF-8 is rejected alone."""
    cfg = f.cfg
    limit = cfg.max_document_bytes
    # The module-wide cap on one field (128 KiB by default) would reject a long ticket;
    # raised, never lowered, so other users of csv keep at least what they had.
    csv.field_size_limit(max(csv.field_size_limit(), limit))
    lines = Lines(chunks, limit)
    head = _first_line(lines, f)
    if isinstance(head, Rejection):
        yield head
        return
    if f.fmt == "tsv":
        delimiter = "\t"
    else:
        delimiter = cfg.csv_delimiter or _sniff(head)
    lines.unread(head)
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    header = _header(reader, f, lines)
    if isinstance(header, Rejection):
        yield header
        return
    used = [k for k in (*cfg.text_fields, cfg.turns_field) if k is not None]
    if not any(k in header for k in used):
        sep = {"\t": "tab"}.get(delimiter, repr(delimiter))
        yield f.reject(
            "missing_text_column",
            f"{f.rel}: the header has none of the columns {used} (columns: {header[:20]}, "
            f"separated by {sep})",
        )
        return
    row = 0
    while True:
        start = lines.lineno + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except _LineTooLong as e:
            row += 1
            source, where = f"{f.rel}#{row}", f"{f.rel} row {row} (line {e.lineno})"
            yield f.reject(
                "too_large", f"{where}: a {e.length}-byte line, more than max_document_bytes={limit}",
                source,
            )
            continue
        except csv.Error as e:
            row += 1
            f.position = f"row {row}"
            source, where = f"{f.rel}#{row}", f"{f.rel} row {row} (line {start})"
            if "field limit" in str(e):  # a quoted field that runs on past the size limit
                yield f.reject("too_large", f"{where}: a field of more than {limit} characters "
                               "(an unclosed quote?)", source)
            else:
                why = str(e)
                if why == "unexpected end of data":
                    why = "a quoted field is never closed (the file ends inside it)"
                yield f.reject("malformed_csv", f"{where}: {why}", source)
            continue
        if not cells:
            continue  # a blank line holds no row
        row += 1
        f.position = f"row {row}"
        source, where = f"{f.rel}#{row}", f"{f.rel} row {row} (line {start})"
        yield _csv_row(cells, header, used, source, where, f)
    if not row:
        yield f.reject("empty_file", f"{f.rel}: a header row and no data rows")


def _first_line(lines: Lines, f: FileContext) -> str | Rejection:
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return f.reject("empty_file", f"{f.rel}: no rows (only blank lines)")
        except _LineTooLong as e:
            return f.reject(
                "too_large",
                f"{f.rel}: header line of {e.length} bytes, more than "
                f"max_document_bytes={f.cfg.max_document_bytes}",
            )
        if line.strip():
            return line


def _header(reader: Any, f: FileContext, lines: Lines) -> list[str] | Rejection:
    try:
        header = next(reader)
    except (csv.Error, _LineTooLong) as e:
        return f.reject("malformed_csv", f"{f.rel}: unreadable header row (line {lines.lineno}): {e}")
    if _ESCAPED.search("".join(header)):
        return f.reject("invalid_utf8", f"{f.rel}: the header row is not valid UTF-8")
    return [h.strip() for h in header]


def _csv_row(
    cells: list[str], header: list[str], used: list[str], source: str, where: str, f: FileContext
) -> Document | Rejection:
    raw = "\x1f".join(cells)
    if len(cells) != len(header):
        return f.reject(
            "malformed_csv",
            f"{where}: {len(cells)} fields, the header has {len(header)}",
            source,
            content=raw,
        )
    record = dict(zip(header, cells))
    for key in used:
        value = record.get(key)
        if value and (m := _ESCAPED.search(value)):
            byte = value[m.start() : m.start() + 4].encode("utf-8", "surrogateescape")
            return f.reject(
                "invalid_utf8",
                f"{where}: column {key!r} is not valid UTF-8 at character {m.start()} ({byte!r})",
                source,
                content=raw,
            )
    return record_document(record, source, where, f, content=raw, cells=True)
