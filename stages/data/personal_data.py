"""The personal-data step of filtered_documents, and what it records.

It runs first in the filter stage, on the cleaned text of every document: language ID, the
quality rules, dedup, the tokenizer and the token arrays see placeholders (`<EMAIL>`),
never the values (`pipelines.data.pii`). A document whose kind is set to `drop_document`
is rejected with reason `pii:<kind>`, and its stored text is redacted like every other
rejection's: the rejected-documents store never holds a value in clear. Read and clean
rejections (undecodable files, pages empty after extraction) are redacted the same way.

What is recorded per document is counts per kind (`pii_counts.parquet` beside the kept
documents), never values. The home's raw_documents and clean_documents are the corpus as
read, kept so a changed setting re-filters without re-reading: they hold what the corpus
holds, and are protected like the corpus itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from pipelines.data.pii import KINDS, Redactor
from stages.config import YunqueConfig

PII_COUNTS = "pii_counts.parquet"  # beside filtered_documents' part: doc_id, source, kept, one column per kind


def redactor(cfg: YunqueConfig) -> Redactor:
    return Redactor(cfg.pii, cfg.language)


@dataclass
class Redacted:
    """A shard's texts after the personal-data step, in input order."""

    texts: list[str]
    counts: list[dict[str, int]]  # found per kind, per document (whatever the action)
    drops: list[str | None]  # the kind whose action is drop_document, per document
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def documents_with(self) -> int:
        return sum(1 for c in self.counts if c)


def redact(texts: list[str], cfg: YunqueConfig) -> Redacted:
    results = redactor(cfg).redact_many(texts)
    totals = {k: sum(r.counts.get(k, 0) for r in results) for k in KINDS}
    return Redacted([r.text for r in results], [r.counts for r in results], [r.drop for r in results],
                    {k: v for k, v in totals.items() if v})


def drop_detail(source: str, counts: dict[str, int], kind: str) -> str:
    return f"{source}: holds {counts.get(kind, 0)} {kind} value(s) and pii.{kind} is drop_document"


def counts_table(doc_ids: pa.Array, sources: pa.Array, kept: list[bool], red: Redacted) -> pa.Table:
    cols: dict[str, pa.Array] = {"doc_id": doc_ids, "source": sources, "kept": pa.array(kept, pa.bool_())}
    for kind in KINDS:
        cols[kind] = pa.array([c.get(kind, 0) for c in red.counts], pa.int32())
    return pa.table(cols)


def redact_rejections(table: pa.Table, cfg: YunqueConfig) -> pa.Table:
    """A rejections table whose `text` column holds no personal value (null stays null)."""
    if table.num_rows == 0:
        return table
    texts = table["text"].to_pylist()
    present = [t for t in texts if t is not None]
    if not present:
        return table
    done = iter(r.text for r in redactor(cfg).redact_many(present))
    out = [None if t is None else next(done) for t in texts]
    return table.set_column(table.schema.get_field_index("text"), "text", pa.array(out, pa.string()))


def summary(red: Redacted) -> dict[str, object]:
    """StageStats.extra's entries: totals per kind and documents that held any."""
    return {"pii": {k: red.totals.get(k, 0) for k in KINDS}, "pii_documents": red.documents_with}


def settings(cfg: YunqueConfig) -> dict[str, object]:
    """What the filter stage found with (recorded in its stats): `yunque inspect pii`
    finds the same values again in clean_documents to show them masked."""
    from dataclasses import asdict

    return {"language": cfg.language, **asdict(cfg.pii)}


@dataclass
class Shown:
    """One value found, as `yunque inspect pii` prints it: masked, in context."""

    shard: str
    source: str
    kind: str
    masked: str  # pipelines.data.pii.mask: the shape, never the value
    context: str  # the text around it, every value in it replaced, this one in [brackets]


def redactions(store, shard: str, n: int, kind: str | None = None, chars: int = 60) -> list[Shown]:
    """Up to `n` values the filter stage found in `shard` (of `kind`), read again from the
    shard's clean_documents with the settings it used; nothing is stored to read back."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.config import PiiConfig
    from pipelines.data.pii import PLACEHOLDERS, mask
    from stages.store.outputs import read_table

    m = store.manifest("filtered_documents", shard) or {}
    used = dict(m.get("stats", {}).get("extra", {}).get("pii_settings") or {})
    if not used:
        return []
    path = store.verified("filtered_documents", shard) / PII_COUNTS
    if not path.exists():
        return []
    language = used.pop("language")
    red = Redactor(PiiConfig(**used), language)
    counts = pq.read_table(path)
    held = pc.greater(counts[kind] if kind else _row_sums(counts), 0)
    ids = set(counts.filter(held)["doc_id"].to_pylist())
    clean = read_table(store.part("clean_documents", shard), ["doc_id", "source", "text"])
    out: list[Shown] = []
    for row in clean.filter(pc.is_in(clean["doc_id"], pa.array(sorted(ids), pa.string()))).to_pylist():
        text, found = row["text"], red.find(row["text"])
        # every value replaced, the shown one bracketed: no context ever holds a value, whole or cut
        pieces, pos, at = [], 0, []
        for f in found:
            pieces.append(text[pos:f.start])
            at.append(sum(len(p) for p in pieces))
            pieces.append(PLACEHOLDERS[f.kind])
            pos = f.end
        pieces.append(text[pos:])
        redacted = "".join(pieces)
        for f, start in zip(found, at):
            if kind and f.kind != kind:
                continue
            end = start + len(PLACEHOLDERS[f.kind])
            context = f"{redacted[max(0, start - chars):start]}[{redacted[start:end]}]{redacted[end:end + chars]}"
            out.append(Shown(shard, row["source"], f.kind, mask(text[f.start:f.end]), " ".join(context.split())))
            if len(out) >= n:
                return out
    return out


def _row_sums(counts: pa.Table) -> pa.Array:
    import pyarrow.compute as pc

    total = counts[KINDS[0]]
    for k in KINDS[1:]:
        total = pc.add(total, counts[k])
    return total
