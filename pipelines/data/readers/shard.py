"""Read one shard of the corpus into Documents, and everything unreadable into Rejections.

The format follows the extension (.html/.htm, .txt, .md, .jsonl, .csv / .tsv, .parquet;
each also .gz, .zst or .bz2). `source` is the path relative to the corpus root, with `#N`
for a record of a multi-record file; `doc_id` is `make_doc_id(source, content)`. Bad input
never stops the shard: each problem is one Rejection(stage="read") with a reason from
READ_REASONS and a warning in the log; files are only ever opened "rb". Formats, ids and
reasons: docs/data.md#reading, docs/data.md#the-output-contract.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipelines.config import ReaderConfig
from pipelines.data.corpus import ShardInfo, get_shard
from pipelines.data.documents import Document, Rejection
from pipelines.data.readers.common import READ_REASONS, FileContext
from pipelines.data.readers.decoding import (
    COMPRESSIONS,
    BadBytes,
    DecompressError,
    SourceError,
    decode,
    iter_chunks,
)
from pipelines.data.readers.parquet import read_parquet
from pipelines.data.readers.records import read_csv, read_jsonl
from pipelines.s3_outage import is_outage

logger = logging.getLogger("pipelines.data.readers")  # one name for every format's warnings, as before the move

FORMATS = {
    ".html": "html",
    ".htm": "html",
    ".txt": "txt",
    ".md": "md",
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
}


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


def iter_shard(
    fs: fsspec.AbstractFileSystem,
    root: str,
    shard: ShardInfo | str,
    cfg: ReaderConfig,
    progress: bool = False,
) -> Iterator[Document | Rejection]:
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


def read_shard(
    fs: fsspec.AbstractFileSystem,
    root: str,
    shard: ShardInfo | str,
    cfg: ReaderConfig,
    progress: bool = False,
) -> tuple[list[Document], list[Rejection]]:
    docs: list[Document] = []
    rejections: list[Rejection] = []
    for item in iter_shard(fs, root, shard, cfg, progress):
        (docs if isinstance(item, Document) else rejections).append(item)
    return docs, rejections


def read_file(
    fs: fsspec.AbstractFileSystem, root: str, shard: str, rel: str, size: int, cfg: ReaderConfig
) -> Iterator[Document | Rejection]:
    """One file (`rel` relative to the root); never raises for bad content or I/O."""
    fmt, compression = detect_format(rel)
    f = FileContext(shard, rel, fmt or "unknown", cfg)
    if (link := _bad_link(fs, f"{root.rstrip('/')}/{rel}")) is not None:
        yield f.reject(*link)
        return
    if fmt is None:
        known = ", ".join(sorted(FORMATS)) + " (optionally + " + ", ".join(COMPRESSIONS) + ")"
        yield f.reject("unknown_format", f"{rel}: unknown file extension; readable: {known}")
        return
    if size == 0:
        yield f.reject("empty_file", f"{rel}: empty file (0 bytes)")
        return
    if compression is None and fmt in ("html", "txt", "md") and size > cfg.max_document_bytes:
        yield f.reject(
            "too_large",
            f"{rel}: {size} bytes, more than max_document_bytes={cfg.max_document_bytes}",
        )
        return
    try:
        with fs.open(f"{root.rstrip('/')}/{rel}", "rb") as raw:
            if fmt == "parquet":
                yield from read_parquet(raw, compression, f)
            else:
                chunks = iter_chunks(raw, compression)
                if fmt == "jsonl":
                    yield from read_jsonl(chunks, f)
                elif fmt in ("csv", "tsv"):
                    yield from read_csv(chunks, f)
                else:
                    yield from _read_text(chunks, f)
    except DecompressError as e:
        after = f" after {f.position} (earlier records were kept)" if f.position else ""
        yield f.reject("decompress_error", f"{rel}: cannot decompress{after}: {e}")
    except (SourceError, OSError) as e:
        if is_outage(e):
            raise
        after = f" after {f.position}" if f.position else ""
        yield f.reject("read_error", f"{rel}: read failed{after}: {e}")
    except Exception as e:  # a reader bug must not stop the shard either; it is logged
        if is_outage(e):  # the store, not the file: the shard fails and is read again later
            raise
        logger.exception("unexpected error reading %s", rel)
        yield f.reject("read_error", f"{rel}: unexpected {type(e).__name__}: {e}")


def _bad_link(fs: fsspec.AbstractFileSystem, path: str) -> tuple[str, str] | None:
    """(reason, detail) for a local symbolic link that cannot be read as a document: the
    listing keeps those (`corpus._list_files`) so that they are rejected, not skipped."""
    if not isinstance(fs, LocalFileSystem) or not os.path.islink(path):
        return None
    try:
        st = os.stat(path)
    except OSError as e:
        return "broken_symlink", f"{path}: symbolic link to {os.readlink(path)!r} cannot be followed: {e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return "symlink_loop", f"{path}: symbolic link to {os.readlink(path)!r}, a directory that holds it"
    return None


def _read_text(chunks: Iterator[bytes], f: FileContext) -> Iterator[Document | Rejection]:
    limit = f.cfg.max_document_bytes
    parts: list[bytes] = []
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:  # a compressed file that expands past the limit: stop there
            yield f.reject(
                "too_large", f"{f.rel}: decompresses to more than max_document_bytes={limit} bytes"
            )
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


__all__ = ["FORMATS", "READ_REASONS", "detect_format", "iter_shard", "read_file", "read_shard"]
