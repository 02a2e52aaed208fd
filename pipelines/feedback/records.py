"""Human ratings as data (no torch, no Dagster): the record the chat page submits, its
validation, and the folder that keeps every record durably.

Records are lines of `<home>/feedback/ratings.jsonl`, appended under a lock and fsynced
before the submitter hears "saved". A record is one judgement: `compare` (two answers;
choice a | b | tie | both_bad) or `rate` (one answer; up | down), either with an optional
`edited` answer, each answer naming the model that wrote it. `id` is the submitter's, so
a resubmission is refused as a duplicate instead of counted twice. The format:
docs/serve.md#ratings-are-data.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FEEDBACK_DIR = "feedback"
RATINGS_FILE = "ratings.jsonl"
LOCK_FILE = ".lock"
FORMAT = 1
CHOICES = {"compare": ("a", "b", "tie", "both_bad"), "rate": ("up", "down")}
ROLES = ("system", "user", "assistant")
# Bounds on what one submission may hold: a page sends a conversation and two replies,
# not a corpus; a larger body is refused before it is parsed (serving.limits).
MAX_TEXT = 32_000  # characters in one message or answer
MAX_MESSAGES = 64
MAX_ID = 64


class FeedbackError(ValueError):
    """A submission that cannot be recorded; the message names the key and the reason."""


class DuplicateFeedback(FeedbackError):
    """`position`: where the first record of that id is (1-based, in the order written)."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


def _text(value: object, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise FeedbackError(f"{key}: expected a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise FeedbackError(f"{key}: empty")
    if len(value) > MAX_TEXT:
        raise FeedbackError(f"{key}: {len(value):,} characters, more than {MAX_TEXT:,}")
    return value


def _messages(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise FeedbackError("messages: expected a non-empty list of {role, content}")
    if len(value) > MAX_MESSAGES:
        raise FeedbackError(f"messages: {len(value)} messages, more than {MAX_MESSAGES}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise FeedbackError(f"messages[{i}].role: expected one of {ROLES}")
        out.append({"role": m["role"], "content": _text(m.get("content"), f"messages[{i}].content")})
    if out[-1]["role"] != "user":
        raise FeedbackError(f"messages[{len(out) - 1}]: the conversation must end with the user's turn "
                            "that the answers reply to")
    return out


def _answer(value: object, i: int) -> dict[str, str]:
    if not isinstance(value, dict):
        raise FeedbackError(f"answers[{i}]: expected an object {{model, version, weights_sha256, text}}")
    out = {"text": _text(value.get("text"), f"answers[{i}].text", empty=True)}
    for key in ("model", "version", "weights_sha256"):
        out[key] = _text(value.get(key), f"answers[{i}].{key}")
    return out


def validate(raw: object, *, now: float | None = None) -> dict[str, Any]:
    """The record to keep, from what a page submitted: FeedbackError names what is wrong.
    `time` is the server's, never the submitter's."""
    if not isinstance(raw, dict):
        raise FeedbackError("expected a JSON object")
    rid = _text(raw.get("id"), "id")
    if len(rid) > MAX_ID or not all(c.isalnum() or c in "-_" for c in rid):
        raise FeedbackError(f"id: at most {MAX_ID} letters, digits, '-' or '_'")
    kind = raw.get("kind")
    if kind not in CHOICES:
        raise FeedbackError(f"kind: expected one of {sorted(CHOICES)}, got {kind!r}")
    answers = raw.get("answers")
    want = 2 if kind == "compare" else 1
    if not isinstance(answers, list) or len(answers) != want:
        raise FeedbackError(f"answers: a {kind} record holds {want} answer(s)")
    answers = [_answer(a, i) for i, a in enumerate(answers)]
    choice = raw.get("choice")
    if choice not in CHOICES[kind]:
        raise FeedbackError(f"choice: a {kind} record's choice is one of {CHOICES[kind]}, got {choice!r}")
    edited = raw.get("edited")
    edited = None if edited in (None, "") else _text(edited, "edited")
    unknown = sorted(set(raw) - {"id", "kind", "messages", "answers", "choice", "edited", "format", "time"})
    if unknown:
        raise FeedbackError(f"unknown keys {unknown}")
    stamp = time.time() if now is None else now
    return {"format": FORMAT, "id": rid, "kind": kind, "messages": _messages(raw.get("messages")),
            "answers": answers, "choice": choice, "edited": edited,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))}


@dataclass
class Read:
    records: list[dict[str, Any]] = field(default_factory=list)
    # lines that are not records: (line number, reason); a torn last line after a crash
    # mid-write is one (its submitter was never told "saved")
    skipped: list[tuple[int, str]] = field(default_factory=list)


def read(directory: str | Path) -> Read:
    """Every record in `directory` (a home's feedback folder), in the order written; later
    duplicates of an id are skipped (a page that resubmits is refused, but a file merged
    by hand may hold one twice)."""
    path = Path(directory) / RATINGS_FILE
    out, seen = Read(), set()
    if not path.exists():
        return out
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                rec = validate(raw)
            except (ValueError, FeedbackError) as e:
                out.skipped.append((lineno, f"{path}:{lineno}: {e}"))
                continue
            if rec["id"] in seen:
                out.skipped.append((lineno, f"{path}:{lineno}: duplicate id {rec['id']}"))
                continue
            rec["time"] = raw.get("time", rec["time"])  # as recorded, not as read
            seen.add(rec["id"])
            out.records.append(rec)
    return out


class FeedbackLog:
    """The append side, shared by every server on one home: each append takes the folder's
    lock, reads what other writers appended since (to refuse a duplicate id whoever wrote
    it first), appends one line and fsyncs it (and the folder, when the file is new)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RATINGS_FILE
        self._ids: dict[str, int] = {}  # id -> its position (1-based, in the order written)
        self._offset = 0  # bytes of the file already read into _ids

    def _catch_up(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a torn tail stays unread until a whole line follows it
        for line in data[:end].splitlines():
            try:
                self._ids.setdefault(str(json.loads(line)["id"]), len(self._ids) + 1)
            except (ValueError, KeyError, TypeError):
                continue
        self._offset += end

    def append(self, raw: object) -> dict[str, Any]:
        """Validate, refuse a duplicate, append durably; returns the record as kept, with
        `position`: its place among the records (1-based), not stored in the file. Records
        are only appended, so a model trained on the first N holds it if N >= position."""
        rec = validate(raw)
        line = (json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode()
        with self._locked():
            self._catch_up()
            if rec["id"] in self._ids:
                raise DuplicateFeedback(f"id {rec['id']}: already recorded (a resubmission is not counted twice)",
                                        self._ids[rec["id"]])
            new = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if not new and os.fstat(fd).st_size > self._offset:
                    # a torn line from a writer killed mid-write: end it, so this record starts clean
                    line = b"\n" + line
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:
                _fsync_dir(self.dir)
            self._catch_up()
            return rec | {"position": self._ids[rec["id"]]}

    def count(self) -> int:
        with self._locked():
            self._catch_up()
            return len(self._ids)

    def _locked(self):
        return _FileLock(self.dir / LOCK_FILE)


class _FileLock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

