"""What the readers of every format share: the rejection reasons and the per-file
context that turns text into a Document or a problem into a Rejection."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipelines.config import ReaderConfig
from pipelines.data.documents import Document, Rejection, make_doc_id
from pipelines.data.readers.decoding import BadBytes, check_binary_text

# One logger for all of reading, whichever module found the problem.
logger = logging.getLogger("pipelines.data.readers")

READ_REASONS = {
    "empty_file": "0 bytes, decompresses to 0 bytes, or holds no records",
    "decompress_error": "corrupt or truncated .gz / .zst / .bz2 stream",
    "binary_content": "NUL bytes or too many control characters",
    "invalid_utf8": "not valid UTF-8 (byte offset in detail)",
    "invalid_encoding": "not valid in the charset the HTML declares",
    "too_large": "one document (file, line or row) over max_document_bytes",
    "malformed_json": "a jsonl line that is not a JSON object",
    "malformed_csv": "a csv row with broken quoting or another field count than the header",
    "missing_text_field": "a jsonl or csv record with none of its text fields "
    "(`reader.text_fields`, `reader.turns_field`; default `text`), or a null parquet `text`",
    "non_string_text": "a text field is not a string (jsonl value or parquet column type)",
    "malformed_turns": "the turns field is not a list of turns (objects with a text, or strings)",
    "empty_text": "the text is empty or only whitespace",
    "missing_text_column": "a parquet file without a `text` column, or a csv header with "
    "none of the text fields",
    "unreadable_parquet": "not a parquet file, or a corrupt one",
    "unknown_format": "an extension no reader handles",
    "read_error": "the file could not be opened or read (I/O error, vanished)",
    "broken_symlink": "a symbolic link whose target is missing, or a loop of links",
    "symlink_loop": "a symbolic link to a directory that holds it (it would be read forever)",
}


@dataclass
class FileContext:
    """One file being read: builds its documents and rejections."""

    shard: str
    rel: str
    fmt: str
    cfg: ReaderConfig
    position: str = ""  # last record reached, for errors in the middle of a stream

    def doc(self, source: str, text: str) -> Document:
        return Document(make_doc_id(source, text), self.shard, source, self.fmt, text)

    def reject(
        self,
        reason: str,
        detail: str,
        source: str | None = None,
        content: str | bytes = b"",
        text: str | None = None,
    ) -> Rejection:
        source = source or self.rel
        assert reason in READ_REASONS, reason
        logger.warning("read rejected %s (%s): %s", source, reason, detail)
        return Rejection(
            make_doc_id(source, text if text is not None else content),
            self.shard,
            source,
            "read",
            reason,
            detail,
            text,
        )


def text_record(
    text: object, source: str, where: str, f: FileContext, content: bytes = b""
) -> Document | Rejection:
    """Checks shared by every record format, once the text is in hand (a parquet `text`
    value, or what `read_records.record_text` made of a jsonl or csv record)."""
    if isinstance(text, bytes):  # parquet binary column
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return f.reject(
                "invalid_utf8",
                f"{where}: invalid UTF-8 at byte offset {e.start}: {e.reason}",
                source,
                content=text,
            )
    if not isinstance(text, str):
        return f.reject(
            "non_string_text",
            f"{where}: 'text' is a {type(text).__name__}, expected a string",
            source,
            content=content,
        )
    try:
        check_binary_text(text, f.cfg.max_control_char_ratio)
    except BadBytes as e:
        return f.reject(e.reason, f"{where}: {e.detail}", source, text=text)
    if not text.strip():
        return f.reject("empty_text", f"{where}: the text is empty or only whitespace", source, text=text)
    return f.doc(source, text)
