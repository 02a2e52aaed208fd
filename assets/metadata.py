"""Turn a stage's `StageStats` into Dagster metadata: counts, drops per reason, bytes,
paths and a preview table of the output; and plots shown inline (`image`)."""

from __future__ import annotations

import base64
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from stages.store.outputs import StageStats

if TYPE_CHECKING:
    from stages.reports.filters.types import FilterReport

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Bytes of PNG shown inline at most: base64 adds a third, and every byte is stored in the
# event log and sent to each browser that opens the asset; our matplotlib plots are ~50 KB.
INLINE_LIMIT = 1_000_000


def drops_markdown(drops: dict[str, int]) -> str:
    if not drops:
        return "nothing dropped"
    rows = "\n".join(f"| `{k}` | {v} |" for k, v in drops.items())
    return f"| reason | documents |\n|---|---|\n{rows}"


def preview(path: Path, n: int = 8, chars: int = 160,
            redact: Callable[[str], str] | None = None) -> dg.TableMetadataValue | None:
    """The first `n` documents, `chars` of each; `redact` first (raw and clean documents
    hold the corpus as read: the event log must not)."""
    if not path.exists():
        return None
    import pyarrow.parquet as pq  # loaded when a stage reports, not when the code location loads

    pf = pq.ParquetFile(path)
    cols = [c for c in ("doc_id", "source", "lang", "text") if c in pf.schema_arrow.names]
    rows = []
    for batch in pf.iter_batches(batch_size=n, columns=cols):
        for r in batch.to_pylist()[:n]:
            text = (redact(r.get("text") or "") if redact else (r.get("text") or "")).replace("\n", " ")
            rec = {"doc_id": r["doc_id"][:12], "source": r["source"], "chars": len(r.get("text") or ""),
                   "text": text[:chars]}
            if "lang" in r:
                rec["lang"] = r["lang"]
            rows.append(dg.TableRecord(rec))
        break
    if not rows:
        return None
    cols_out = ["doc_id", "source", "chars", *(["lang"] if "lang" in cols else []), "text"]
    schema = dg.TableSchema(columns=[dg.TableColumn(c, "int" if c == "chars" else "string") for c in cols_out])
    return dg.MetadataValue.table(rows, schema=schema)


def stage_metadata(stats: StageStats, output: Path | None = None, rejected: Path | None = None,
                   redact: Callable[[str], str] | None = None, **extra: Any) -> dict[str, Any]:
    """A stage's stats as materialization metadata: counts, drops, bytes, paths, a preview."""
    md: dict[str, Any] = {
        "documents_in": stats.docs_in,
        "documents_out": stats.docs_out,
        "rejected": stats.rejected,
        "drops": dg.MetadataValue.md(drops_markdown(stats.drops)),
        "drops_json": dg.MetadataValue.json(stats.drops),
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "cached": stats.cached,
        "cache_key": stats.key,
        "dagster/row_count": stats.docs_out,
    }
    if stats.docs_in:
        md["kept_fraction"] = round(stats.docs_out / stats.docs_in, 4)
    for k, v in stats.extra.items():
        if k in ("shard_digests", "shard_inputs"):
            continue
        md[k] = dg.MetadataValue.json(v) if isinstance(v, (dict, list)) else v
    if output is not None:
        md["path"] = dg.MetadataValue.path(str(output))
        if (p := preview(output, redact=redact)) is not None:
            md["preview"] = p
    if rejected is not None:
        md["rejected_path"] = dg.MetadataValue.path(str(rejected))
    md.update(extra)
    return md


def pii_metadata(stats: StageStats) -> dict[str, Any]:
    """A shard's personal-data counts as numbers (`pii/email`, ...), one entry per kind on
    the shard's materialization (the per-shard chart is dedup_index's). Counts only: no
    value is ever stored."""
    found = stats.extra.get("pii") or {}
    return {f"pii/{kind}": int(n) for kind, n in found.items()}


def quality_metadata(stats: StageStats) -> dict[str, Any]:
    """quality_model's view: the threshold, the score histogram with it (text, like the
    rules' histograms), and what the held-out part says it catches and costs."""
    extra = stats.extra
    if not extra.get("enabled", True):
        return {"learned_quality": dg.MetadataValue.md(f"Off for this corpus: {extra.get('off_because', '')}")}
    h = extra["score_histogram"]
    peak = max(h["counts"]) or 1
    lines = [(f"Scores of {sum(h['counts']):,} filtered documents (P(good)); dropped below "
             f"**{extra['threshold']:.3f}**: {stats.rejected:,}"), "", "```"]
    for lo, hi, n in zip(h["edges"], h["edges"][1:], h["counts"]):
        mark = "<" if hi <= extra["threshold"] else " "
        lines.append(f"{mark} {lo:.2f}-{hi:.2f} {'#' * round(40 * n / peak):<40} {n:,}")
    lines.append("```")
    # the held-out report is the stats' `report` entry, shown as JSON by stage_metadata
    return {"threshold": float(extra["threshold"]), "retrained": bool(extra.get("retrained")),
            "learned_quality_dropped": stats.rejected,
            "score_histogram": dg.MetadataValue.md("\n".join(lines))}


def stage_result(stats: StageStats, output: Path | None = None, rejected: Path | None = None,
                 **extra: Any) -> dg.MaterializeResult:
    """`stage_metadata` for a whole-corpus asset, with the stage's cache key as data version."""
    return dg.MaterializeResult(metadata=stage_metadata(stats, output, rejected, **extra),
                                data_version=dg.DataVersion(stats.key))


def rows_table(rows: list[dict]) -> dg.TableMetadataValue:
    """A metadata table from rows of one shape; column types from the first row."""
    cols = list(rows[0])
    kinds = {c: "float" if isinstance(rows[0][c], float) else "int" if isinstance(rows[0][c], int) else "string"
             for c in cols}
    return dg.MetadataValue.table([dg.TableRecord(r) for r in rows],
                                  schema=dg.TableSchema([dg.TableColumn(c, kinds[c]) for c in cols]))


def image(path: Path, alt: str, limit: int = INLINE_LIMIT) -> dg.MetadataValue:
    """A PNG shown in the Dagster UI: markdown whose image is a base64 data: URI. The UI
    renders markdown metadata with MarkdownWithPlugins, which adds "data" to
    rehype-sanitize's allowed `src` protocols (dagster-webserver's bundle), and the
    webserver's CSP sets no img-src; markdown over 1,000 characters (any image) sits
    behind the entry's "[Show Markdown]" button, which opens the rendered plot in a dialog
    titled with the entry's key: the key is the plot's only visible label (a heading in
    the markdown would show only once opened), so name it for what the plot shows
    ("plot: loss by step"), not for its file. A file that is missing, not a PNG or over
    `limit` bytes comes back as a path, with a warning."""
    path = Path(path)
    size = path.stat().st_size if path.is_file() else -1
    data = path.read_bytes() if 0 <= size <= limit else b""  # never read a large file whole
    if not data.startswith(PNG_SIGNATURE):
        why = ("missing" if size < 0 else f"{size:,} bytes, over the {limit:,} shown inline" if size > limit
               else "not a PNG")
        warnings.warn(f"{path}: {why}; metadata keeps its path", stacklevel=2)
        return dg.MetadataValue.path(str(path))
    # brackets and newlines would end the alt text early
    text = " ".join(re.sub(r"[\[\]]", " ", alt).split())
    return dg.MetadataValue.md(f"![{text}](data:image/png;base64,{base64.b64encode(data).decode('ascii')})")


def filter_report_metadata(report: FilterReport) -> dict[str, Any]:
    """The filtered_documents report (`stages.reports.filters.types.FilterReport`) as metadata: the
    rules with thresholds and counts, the language-ID drops, the profile, one text
    histogram table per filter (`stages.reports.filters.histograms.text_histograms`; the PNGs are
    drawn on demand by `yunque inspect filters --plot`), and the rejected sample per reason."""
    from stages.reports.filters.report import samples_markdown, text_histograms

    md: dict[str, Any] = {
        "filter_rules": rows_table([r.row() for r in report.rules]) if report.rules else "no rules",
        "filter_profile": dg.MetadataValue.json(report.profile),
        "langid": dg.MetadataValue.json(report.langid),
        "rejected_samples": dg.MetadataValue.md(samples_markdown(report.samples, report.drops)),
    }
    for family, text in text_histograms(report).items():
        md[f"histograms/{family}"] = dg.MetadataValue.md(text)
    return md
