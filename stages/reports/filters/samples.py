"""The rejected-document sample of the filter report: which rejections to show (the
smallest doc_ids of a reason, text cut short), the metric value and threshold that dropped
each one, and the sample as markdown (asset metadata) or terminal text
(`yunque inspect rejected`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from stages.reports.filters.metrics import rules_of

SAMPLE_N = 5
SAMPLE_CHARS = 300


def sample(rejected: pa.Table, reasons: Sequence[str], n: int = SAMPLE_N, chars: int = SAMPLE_CHARS
           ) -> list[dict[str, Any]]:
    """The n rejections of `reasons` with the smallest doc_ids, text cut to `chars`."""
    hits = rejected.filter(pc.is_in(rejected["reason"], pa.array(list(reasons), pa.string())))
    hits = hits.sort_by([("doc_id", "ascending")]).slice(0, n)
    out = []
    for r in hits.select(["doc_id", "shard", "source", "stage", "reason", "detail", "text"]).to_pylist():
        text = r["text"]
        r["chars"] = None if text is None else len(text)
        r["text"] = None if text is None else text[:chars]
        out.append(r)
    return out


def attach_values(samples: dict[str, list[dict[str, Any]]], metrics: pa.Table) -> None:
    """Each sampled document's value of the metric that dropped it, and the rule's
    threshold ("above 0.2"), where the metrics table has them."""
    rules = {r.reason: r for r in rules_of(metrics)}
    for reason, rows in samples.items():
        if reason not in rules or reason not in metrics.column_names or not rows:
            continue
        ids = pa.array([r["doc_id"] for r in rows], pa.string())
        sub = metrics.filter(pc.is_in(metrics["doc_id"], ids)).select(["doc_id", reason]).to_pylist()
        by_id = {r["doc_id"]: r[reason] for r in sub}
        rule = rules[reason]
        for r in rows:
            r["value"] = by_id.get(r["doc_id"])
            r["threshold"] = f"{rule.drop_if} {rule.threshold:g}" if rule.threshold is not None else "off"


def _missing(r: dict[str, Any]) -> str:
    """What stands in for a rejection without text: a record the reader could not read
    (malformed JSON, no text column) never had any; a later stage's was too large or
    undecodable to keep."""
    if r.get("stage") == "read":
        return "(no text: the reader never made a document of it; the detail says why)"
    return "(text not kept: undecodable or too large)"


def _length(r: dict[str, Any]) -> str:
    return "no text" if r["chars"] is None else f"{r['chars']} chars"


def _quote(r: dict[str, Any]) -> str:
    if r["text"] is None:
        return _missing(r)
    return r["text"].replace("```", "'''")


def samples_markdown(samples: dict[str, list[dict[str, Any]]], counts: dict[str, int]) -> str:
    """The rejected sample as markdown: per reason, its count, then each document's id,
    source, length, the metric value that dropped it and its first characters."""
    parts = []
    for reason, rows in samples.items():
        parts.append(f"#### `{reason}`: {counts.get(reason, len(rows))} documents, {len(rows)} shown")
        for r in rows:
            value = _value(r)
            parts.append(f"`{r['doc_id'][:12]}` {r['source']} ({_length(r)}{value})\n\n"
                         f"```\n{_quote(r)}\n```")
    return "\n\n".join(parts) or "nothing rejected"


def _value(r: dict[str, Any]) -> str:
    if not isinstance(r.get("value"), float):
        return ""
    rule = "flagged" if r["threshold"].startswith("flag") else f"dropped {r['threshold']}"
    return f", value {r['value']:.4g}, {rule}"


def terminal_text(rows: list[dict[str, Any]]) -> str:
    """The same sample for a terminal (`yunque inspect rejected`): a header line per
    document (doc_id first: a source may hold spaces), then its text."""
    out = []
    for r in rows:
        out.append(f"--- {r['doc_id'][:12]}  {r['reason']}  {r['source']}  ({_length(r)}{_value(r)}; "
                   f"{r['stage']} stage)")
        if r.get("detail") and r["detail"] != f"{r['source']}: {r['reason']}":  # says more than the header
            out.append(f"    {r['detail']}")
        out.append(r["text"] if r["text"] is not None else _missing(r))
    return "\n".join(out)
