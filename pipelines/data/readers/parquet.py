"""Parquet files: column `text`, one document per row, read batch by batch."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.documents import Document, Rejection
from pipelines.data.readers.common import FileContext, text_record
from pipelines.data.readers.decoding import iter_chunks

_PARQUET_BATCH = 1024
_SPOOL_BYTES = 64 << 20  # a decompressed .parquet.gz goes to disk beyond this


def read_parquet(
    raw: BinaryIO, compression: str | None, f: FileContext
) -> Iterator[Document | Rejection]:
    if compression is None:
        yield from _parquet_rows(raw, f)
        return
    # Parquet needs random access: spool the decompressed bytes (to disk when large).
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as tmp:
        for chunk in iter_chunks(raw, compression):
            tmp.write(chunk)
        tmp.seek(0)
        yield from _parquet_rows(tmp, f)  # type: ignore[arg-type]


def _parquet_rows(src: BinaryIO, f: FileContext) -> Iterator[Document | Rejection]:
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
    if not (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
        or pa.types.is_string_view(typ)
    ):
        yield f.reject("non_string_text", f"{f.rel}: 'text' column has type {typ}, expected string")
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
                    yield f.reject(
                        "too_large",
                        f"{where}: {n} bytes, more than max_document_bytes={limit}",
                        source,
                    )
                elif value is None:
                    yield f.reject("missing_text_field", f"{where}: 'text' is null", source)
                else:
                    yield text_record(value, source, where, f)
    except (pa.ArrowException, OSError) as e:
        yield f.reject("unreadable_parquet", f"{f.rel}: corrupt after row {row}: {e}")
