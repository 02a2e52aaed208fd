"""The two record types every data stage passes along: kept documents and rejections.

A document read from the corpus ends up exactly once either in `deduped_documents` or
in `rejected_documents` (with the stage and reason that dropped it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

# Columns shared by all kept-document tables; later stages add columns after these.
DOC_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("shard", pa.string()),
    pa.field("source", pa.string()),
    pa.field("format", pa.string()),
    pa.field("text", pa.string()),
]
DOC_SCHEMA = pa.schema(DOC_FIELDS)
# what filtered_documents (and deduped_documents after it) store: the language ID rides along
FILTERED_SCHEMA = pa.schema([*DOC_SCHEMA, pa.field("lang", pa.string()), pa.field("lang_score", pa.float32())])

REJECT_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("source", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("detail", pa.string()),
        pa.field("text", pa.string()),  # null when the bytes could not be decoded or are too large
    ]
)


def make_doc_id(source: str, content: str | bytes) -> str:
    """Stable id from the document's content and where it came from.

    The source is part of the key so that two files with identical bytes are still two
    documents read (the duplicate is then dropped by dedup, with its reason).
    """
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    h = xxhash.xxh3_128()
    h.update(source.encode("utf-8", "surrogateescape"))
    h.update(b"\0")
    h.update(content)
    return h.hexdigest()


@dataclass
class Document:
    doc_id: str
    shard: str
    source: str  # path relative to the corpus root, "#N" for the Nth record of a file
    format: str  # html, txt, md, jsonl, parquet
    text: str


@dataclass
class Rejection:
    doc_id: str
    shard: str
    source: str
    stage: str  # read, clean, filter, langid, dedup
    reason: str  # short machine-readable reason, e.g. "gopher_quality:min_doc_words"
    detail: str  # human-readable: file, line and why
    text: str | None = None


def documents_table(docs: list[Document]) -> pa.Table:
    return pa.Table.from_pylist([d.__dict__ for d in docs], schema=DOC_SCHEMA)


def rejections_table(rejs: list[Rejection]) -> pa.Table:
    return pa.Table.from_pylist([r.__dict__ for r in rejs], schema=REJECT_SCHEMA)


def text_bytes(table: pa.Table) -> int:
    """The UTF-8 bytes of a documents table's text column (a stage's bytes in and out)."""
    if table.num_rows == 0:
        return 0
    return int(pc.sum(pc.binary_length(table["text"])).as_py() or 0)
