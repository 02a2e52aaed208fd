"""Read one shard of the corpus into Documents, and everything unreadable into Rejections.

Formats by extension: .html/.htm, .txt, .md (one document per file), .jsonl (field
`text`, one document per line) and .parquet (column `text`, one per row); each may also
be compressed as .gz, .zst or .bz2 (`a.jsonl.gz`).

`source` is the path relative to the corpus root (so it starts with the shard name),
with `#N` (1-based line or row) for multi-record files. `doc_id` is
`make_doc_id(source, content)`, where content is the decoded text when there is one,
else the raw bytes when they were read, else b"" (file-level rejections).

Bad input never stops the shard: each problem becomes one Rejection(stage="read") with a
reason from READ_REASONS, and a warning in the log. Files are only ever opened "rb".
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.config import ReaderConfig
from pipelines.corpus import ShardInfo, get_shard
from pipelines.decoding import (
    COMPRESSIONS,
    BadBytes,
    DecompressError,
    SourceError,
    check_binary_bytes,
    check_binary_text,
    decode,
    iter_chunks,
    iter_lines,
)
from pipelines.documents import Document, Rejection, make_doc_id

logger = logging.getLogger(__name__)

FORMATS = {".html": "html", ".htm": "html", ".txt": "txt", ".md": "md",
           ".jsonl": "jsonl", ".parquet": "parquet"}

READ_REASONS = {
    "empty_file": "0 bytes, decompresses to 0 bytes, or holds no records",
    "decompress_error": "corrupt or truncated .gz / .zst / .bz2 stream",
    "binary_content": "NUL bytes or too many control characters",
    "invalid_utf8": "not valid UTF-8 (byte offset in detail)",
    "invalid_encoding": "not valid in the charset the HTML declares",
    "too_large": "one document (file, line or row) over max_document_bytes",
    "malformed_json": "a jsonl line that is not a JSON object",
    "missing_text_field": "a jsonl record without `text`, or a null parquet `text`",
    "non_string_text": "`text` is not a string (jsonl value or parquet column type)",
    "empty_text": "`text` is empty or only whitespace",
    "missing_text_column": "a parquet file without a `text` column",
    "unreadable_parquet": "not a parquet file, or a corrupt one",
    "unknown_format": "an extension no reader handles",
    "read_error": "the file could not be opened or read (I/O error, vanished)",
}

_PARQUET_BATCH = 1024
_SPOOL_BYTES = 64 << 20  # a decompressed .parquet.gz goes to disk beyond this


def detect_format(rel: str) -> tuple[str | None, str | None]:
    """(format, compression) from the file name, e.g. "a/b.jsonl.gz" -> ("jsonl", "gzip")."""
    name = rel.rsplit("/", 1)[-1].lower()
    compression = None
    for ext, comp in COMPRESSIONS.items():
        if name.endswith(ext):
            name, compression = name[: -len(ext)], comp
            break
    for ext, fmt in FORMATS.items():
        if name.endswith(ext):
            return fmt, compression
    return None, compression


@dataclass
class _File:
    """One file being read: builds its documents and rejections."""

    shard: str
    rel: str
    fmt: str
    cfg: ReaderConfig
    position: str = ""  # last record reached, for errors in the middle of a stream

    def doc(self, source: str, text: str) -> Document:
        return Document(make_doc_id(source, text), self.shard, source, self.fmt, text)

    def reject(self, reason: str, detail: str, source: str | None = None,
               content: str | bytes = b"", text: str | None = None) -> Rejection:
        source = source or self.rel
        assert reason in READ_REASONS, reason
        logger.warning("read rejected %s (%s): %s", source, reason, detail)
        return Rejection(make_doc_id(source, text if text is not None else content),
                         self.shard, source, "read", reason, detail, text)


def iter_shard(fs: fsspec.AbstractFileSystem, root: str, shard: ShardInfo | str,
               cfg: ReaderConfig, progress: bool = False) -> Iterator[Document | Rejection]:
    """Documents and rejections of a shard, file by file in sorted order.

    `shard` is a ShardInfo from `list_shards` or the shard's name under the root.
    """
    info = shard if isinstance(shard, ShardInfo) else get_shard(fs, root, shard)
    files = info.files
    if progress:
        from tqdm.auto import tqdm

        files = tqdm(files, desc=f"read {info.key}", unit="file")
    for rel, size, _token in files:
        yield from read_file(fs, root, info.key, rel, size, cfg)


def read_shard(fs: fsspec.AbstractFileSystem, root: str, shard: ShardInfo | str,
               cfg: ReaderConfig, progress: bool = False
               ) -> tuple[list[Document], list[Rejection]]:
    docs: list[Document] = []
    rejections: list[Rejection] = []
    for item in iter_shard(fs, root, shard, cfg, progress):
        (docs if isinstance(item, Document) else rejections).append(item)
    return docs, rejections


def read_file(fs: fsspec.AbstractFileSystem, root: str, shard: str, rel: str, size: int,
              cfg: ReaderConfig) -> Iterator[Document | Rejection]:
    """One file (`rel` relative to the root); never raises for bad content or I/O."""
    fmt, compression = detect_format(rel)
    f = _File(shard, rel, fmt or "unknown", cfg)
    if fmt is None:
        known = ", ".join(sorted(FORMATS)) + " (optionally + " + ", ".join(COMPRESSIONS) + ")"
        yield f.reject("unknown_format", f"{rel}: unknown file extension; readable: {known}")
        return
    if size == 0:
        yield f.reject("empty_file", f"{rel}: empty file (0 bytes)")
        return
    if compression is None and fmt in ("html", "txt", "md") and size > cfg.max_document_bytes:
        yield f.reject("too_large", f"{rel}: {size} bytes, more than max_document_bytes="
                       f"{cfg.max_document_bytes}")
        return
    after = ""
    try:
        with fs.open(f"{root.rstrip('/')}/{rel}", "rb") as raw:
            if fmt == "parquet":
                yield from _read_parquet(raw, compression, f)
            else:
                chunks = iter_chunks(raw, compression)
                yield from (_read_jsonl(chunks, f) if fmt == "jsonl" else _read_text(chunks, f))
    except DecompressError as e:
        after = f" after {f.position} (earlier records were kept)" if f.position else ""
        yield f.reject("decompress_error", f"{rel}: cannot decompress{after}: {e}")
    except (SourceError, OSError) as e:
        after = f" after {f.position}" if f.position else ""
        yield f.reject("read_error", f"{rel}: read failed{after}: {e}")


def _read_text(chunks: Iterator[bytes], f: _File) -> Iterator[Document | Rejection]:
    limit = f.cfg.max_document_bytes
    parts: list[bytes] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:  # a compressed file that expands past the limit: stop there
            yield f.reject("too_large", f"{f.rel}: decompresses to more than "
                           f"max_document_bytes={limit} bytes")
            return
        parts.append(chunk)
    data = b"".join(parts)
    del parts
    if not data:
        yield f.reject("empty_file", f"{f.rel}: decompresses to 0 bytes")
        return
    try:
        text = decode(data, f.fmt == "html", f.cfg.max_control_char_ratio)
    except BadBytes as e:
        yield f.reject(e.reason, f"{f.rel}: {e.detail}", content=data)
        return
    if not text.strip():
        yield f.reject("empty_text", f"{f.rel}: only whitespace", text=text)
        return
    yield f.doc(f.rel, text)


def _read_jsonl(chunks: Iterator[bytes], f: _File) -> Iterator[Document | Rejection]:
    limit, ratio = f.cfg.max_document_bytes, f.cfg.max_control_char_ratio
    records = 0
    for lineno, offset, line, length in iter_lines(chunks, limit):
        f.position = f"line {lineno}"
        source, where = f"{f.rel}#{lineno}", f"{f.rel} line {lineno}"
        if line is None:
            yield f.reject("too_large", f"{where}: {length} bytes, more than "
                           f"max_document_bytes={limit}", source)
            records += 1
            continue
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if not line.strip():
            continue  # blank lines hold no record
        records += 1
        item = _jsonl_record(line, offset, source, where, ratio, f)
        yield item
    if not records:
        yield f.reject("empty_file", f"{f.rel}: no records (only blank lines)")


def _jsonl_record(line: bytes, offset: int, source: str, where: str, ratio: float,
                  f: _File) -> Document | Rejection:
    try:
        check_binary_bytes(line.rstrip(b"\r"), ratio)
        s = line.decode("utf-8")
    except BadBytes as e:
        return f.reject(e.reason, f"{where}: {e.detail}", source, content=line)
    except UnicodeDecodeError as e:
        return f.reject("invalid_utf8", f"{where}: invalid UTF-8 at byte offset {e.start} "
                        f"of the line (offset {offset + e.start} in the file, "
                        f"{line[e.start:e.start + 4]!r}): {e.reason}", source, content=line)
    try:
        record = json.loads(s)
    except ValueError as e:
        return f.reject("malformed_json", f"{where}: invalid JSON: {e}", source, content=line)
    if not isinstance(record, dict):
        return f.reject("malformed_json", f"{where}: a JSON {type(record).__name__}, "
                        "expected an object", source, content=line)
    if "text" not in record or record["text"] is None:
        keys = sorted(record)[:20]
        return f.reject("missing_text_field", f"{where}: no 'text' field (keys: {keys})",
                        source, content=line)
    return _text_record(record["text"], source, where, f, content=line)


def _text_record(text: object, source: str, where: str, f: _File,
                 content: bytes = b"") -> Document | Rejection:
    """Checks shared by jsonl and parquet records, once `text` is in hand."""
    if isinstance(text, bytes):  # parquet binary column
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return f.reject("invalid_utf8", f"{where}: invalid UTF-8 at byte offset "
                            f"{e.start}: {e.reason}", source, content=text)
    if not isinstance(text, str):
        return f.reject("non_string_text", f"{where}: 'text' is a {type(text).__name__}, "
                        "expected a string", source, content=content)
    try:
        check_binary_text(text, f.cfg.max_control_char_ratio)
    except BadBytes as e:
        return f.reject(e.reason, f"{where}: {e.detail}", source, text=text)
    if not text.strip():
        return f.reject("empty_text", f"{where}: 'text' is empty", source, text=text)
    return f.doc(source, text)


def _read_parquet(raw: BinaryIO, compression: str | None,
                  f: _File) -> Iterator[Document | Rejection]:
    if compression is None:
        yield from _parquet_rows(raw, f)
        return
    # Parquet needs random access: spool the decompressed bytes (to disk when large).
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as tmp:
        for chunk in iter_chunks(raw, compression):
            tmp.write(chunk)
        tmp.seek(0)
        yield from _parquet_rows(tmp, f)  # type: ignore[arg-type]


def _parquet_rows(src: BinaryIO, f: _File) -> Iterator[Document | Rejection]:
    try:
        pf = pq.ParquetFile(src)
    except (pa.ArrowException, OSError, ValueError) as e:
        yield f.reject("unreadable_parquet", f"{f.rel}: not a readable parquet file: {e}")
        return
    names = pf.schema_arrow.names
    if "text" not in names:
        yield f.reject("missing_text_column", f"{f.rel}: no 'text' column; columns: {names}")
        return
    typ = pf.schema_arrow.field("text").type
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)
            or pa.types.is_binary(typ) or pa.types.is_large_binary(typ)
            or pa.types.is_string_view(typ)):
        yield f.reject("non_string_text", f"{f.rel}: 'text' column has type {typ}, "
                       "expected string")
        return
    if pf.metadata.num_rows == 0:
        yield f.reject("empty_file", f"{f.rel}: 0 rows")
        return
    limit, row = f.cfg.max_document_bytes, 0
    try:
        # Batch by batch within row groups: a 1 GB file is never in memory whole, and a
        # too-large value is nulled in Arrow before any Python copy of it is made.
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH, columns=["text"]):
            col = batch.column(0)
            lengths = pc.binary_length(col)
            big = pc.fill_null(pc.greater(lengths, limit), False)
            values = pc.if_else(big, pa.scalar(None, col.type), col).to_pylist()
            for value, n, too_big in zip(values, lengths.to_pylist(), big.to_pylist()):
                row += 1
                f.position = f"row {row}"
                source, where = f"{f.rel}#{row}", f"{f.rel} row {row}"
                if too_big:
                    yield f.reject("too_large", f"{where}: {n} bytes, more than "
                                   f"max_document_bytes={limit}", source)
                elif value is None:
                    yield f.reject("missing_text_field", f"{where}: 'text' is null", source)
                else:
                    yield _text_record(value, source, where, f)
    except (pa.ArrowException, OSError) as e:
        yield f.reject("unreadable_parquet", f"{f.rel}: corrupt after row {row}: {e}")
