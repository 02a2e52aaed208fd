"""Bytes to text for the readers: decompression as a stream of chunks, charset choice,
binary detection, and line splitting with a size limit.

Kept apart from `readers.py` so that the per-format logic there reads as "what becomes a
document", and the byte-level traps (truncated streams, BOMs, zip bombs of one line)
live in one place.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import re
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import zstandard

CHUNK = 1 << 20  # decompressed bytes handed on at a time
_ZSTD_INPUT = 1 << 16

COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}


class DecompressError(Exception):
    """The compressed stream is corrupt or truncated (message from the decompressor)."""


class SourceError(Exception):
    """Reading the underlying file failed (I/O, network, file vanished)."""


class BadBytes(Exception):
    """Bytes that cannot become text: `reason` is a read rejection code."""

    def __init__(self, reason: str, detail: str, offset: int | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.offset = offset


class _Guarded:
    """Wraps the raw file so that its own errors are told apart from the decompressor's
    (bz2 reports corrupt data as a plain OSError, like an I/O failure would be)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        try:
            return self.raw.read(n)
        except Exception as e:
            raise SourceError(f"{type(e).__name__}: {e}") from e


def iter_chunks(raw: BinaryIO, compression: str | None) -> Iterator[bytes]:
    """Decompressed content of `raw` in chunks of at most about CHUNK bytes."""
    guarded = _Guarded(raw)
    if compression is None:
        while chunk := guarded.read(CHUNK):
            yield chunk
        return
    if compression == "zstd":
        yield from _zstd_chunks(guarded)
        return
    stream: BinaryIO
    if compression == "gzip":
        stream = gzip.GzipFile(fileobj=guarded, mode="rb")  # type: ignore[arg-type]
    else:
        stream = bz2.BZ2File(guarded, "rb")  # type: ignore[arg-type]
    while True:
        try:
            chunk = stream.read1(CHUNK)  # read1: what decoded before an error is kept
        except SourceError:
            raise
        except (EOFError, OSError, zlib.error) as e:
            raise DecompressError(f"{compression}: {type(e).__name__}: {e}") from e
        if not chunk:
            return
        yield chunk


def _zstd_chunks(src: _Guarded) -> Iterator[bytes]:
    # zstandard's stream_reader returns a clean EOF on a truncated frame, so frames are
    # decoded one by one and an unfinished frame at the end of input is an error.
    dobj = zstandard.ZstdDecompressor().decompressobj()
    in_frame = False
    while data := src.read(_ZSTD_INPUT):
        while data:
            try:
                out = dobj.decompress(data)
            except zstandard.ZstdError as e:
                raise DecompressError(f"zstd: {e}") from e
            in_frame = True
            for i in range(0, len(out), CHUNK):
                yield out[i : i + CHUNK]
            if dobj.eof:  # frame done; the rest of the input may hold more frames
                data = dobj.unused_data
                dobj = zstandard.ZstdDecompressor().decompressobj()
                in_frame = False
            else:
                data = b""
    if in_frame:
        raise DecompressError("zstd: input ended in the middle of a frame (truncated file)")


def iter_lines(chunks: Iterator[bytes], limit: int) -> Iterator[tuple[int, int, bytes | None, int]]:
    """(1-based line number, byte offset in the stream, line or None if longer than
    `limit`, line length) for each line. An over-long line is skipped as it streams by,
    so memory stays near `limit` + CHUNK however long the line is."""
    lineno = offset = length = 0
    parts: list[bytes] = []
    dropped = False
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        for k, piece in enumerate(pieces):
            length += len(piece)
            if not dropped:
                parts.append(piece)
                if length > limit:
                    dropped, parts = True, []
            if k == len(pieces) - 1:
                break  # no newline yet: the line continues in the next chunk
            lineno += 1
            yield lineno, offset, None if dropped else b"".join(parts), length
            offset += length + 1
            length, parts, dropped = 0, [], False
    if length or dropped:  # last line without a trailing newline
        yield lineno + 1, offset, None if dropped else b"".join(parts), length


# --- charset -------------------------------------------------------------------------

_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
]
_META_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_:.+-]+)""", re.IGNORECASE
)
_XML_ENCODING = re.compile(
    rb"""<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9_:.+-]+)""", re.IGNORECASE
)
# As browsers do (WHATWG encoding spec): these labels mean windows-1252, and a meta
# tag cannot switch a byte stream to UTF-16.
_LABEL_ALIASES = {
    "iso8859-1": "cp1252",
    "latin-1": "cp1252",
    "ascii": "cp1252",
    "utf-16": "utf-8",
    "utf-16-le": "utf-8",
    "utf-16-be": "utf-8",
}
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13)) + b"\x7f"


def sniff_encoding(data: bytes, html: bool) -> tuple[str, int]:
    """(codec name, BOM length): a BOM wins, then an HTML meta / XML declaration in the
    first 4 KiB, else UTF-8."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, len(bom)
    if html:
        head = data[:4096]
        m = _META_CHARSET.search(head) or _XML_ENCODING.search(head)
        if m:
            try:
                name = codecs.lookup(m.group(1).decode("ascii")).name
            except LookupError:
                return "utf-8", 0  # unknown label: the UTF-8 default applies
            return _LABEL_ALIASES.get(name, name), 0
    return "utf-8", 0


def check_binary_bytes(data: bytes, max_ratio: float) -> None:
    nul = data.count(0)
    ctrl = len(data) - len(data.translate(None, _CONTROL_BYTES))
    _raise_if_binary(nul, ctrl, len(data), max_ratio)


def check_binary_text(text: str, max_ratio: float) -> None:
    # The control characters are ASCII, which UTF-8 writes as the same single bytes and
    # never inside another character's bytes: counted on the encoded text with
    # bytes.translate, 40 times faster than str.translate over a dict (bench/bench_records.py)
    data = text.encode("utf-8", "surrogatepass")
    nul = data.count(0)
    ctrl = len(data) - len(data.translate(None, _CONTROL_BYTES))
    _raise_if_binary(nul, ctrl, len(text), max_ratio)


def _raise_if_binary(nul: int, ctrl: int, n: int, max_ratio: float) -> None:
    ratio = ctrl / n if n else 0.0
    if nul or ratio > max_ratio:
        raise BadBytes(
            "binary_content",
            f"binary content: {nul} NUL bytes, control-character ratio {ratio:.3f} "
            f"(limit {max_ratio:.3f})",
        )


def decode(data: bytes, html: bool, max_control_ratio: float) -> str:
    """Text of one document's bytes, or BadBytes(binary_content / invalid_utf8 /
    invalid_encoding). Binary is checked first: garbage is nearly never valid UTF-8, and
    "binary" is the more useful reason."""
    encoding, skip = sniff_encoding(data, html)
    wide = encoding in ("utf-16", "utf-32")  # NUL bytes are normal there
    if not wide:
        check_binary_bytes(data, max_control_ratio)
    try:
        text = data[skip:].decode(encoding)
    except UnicodeDecodeError as e:
        if encoding == "cp1252":  # bytes cp1252 leaves undefined: read as the label says
            text = data[skip:].decode("latin-1")
        else:
            off = e.start + skip
            snippet = data[off : off + 4]
            reason = "invalid_utf8" if encoding == "utf-8" else "invalid_encoding"
            raise BadBytes(
                reason,
                f"invalid {encoding} at byte offset {off} ({snippet!r}): {e.reason}",
                offset=off,
            ) from e
    if wide:
        check_binary_text(text, max_control_ratio)
    return text
