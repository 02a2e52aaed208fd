"""What the quality filters did to one shard, for a person to judge before trusting them:
per rule, the distribution of its metric against its threshold, how many documents it
dropped (as their first failing rule) and how many fail it at all, and a sample of the
documents each reason rejected.

`filter_stage` writes one row per document it judged into `filter_metrics.parquet`, next
to the kept documents (same committed version, so a remote home carries it): doc_id,
source, kept, reason, the language ID, and one float column per rule reason. A null
there means the rule never saw the document (language ID dropped it first), NaN that the
metric cannot be measured on it (no words). The rules and the profile that judged them
ride in the file's schema metadata, so the report needs nothing but the file.

The rejected-document sample is deterministic: the smallest doc_ids of a reason (doc_ids
are content hashes, so that is an arbitrary but stable pick), the first 300 characters
of each. `yunque inspect rejected` prints the same sample.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.filters.rules import RuleSpec
from stages.store import DataStore

FILTER_METRICS = "filter_metrics.parquet"
RULES_META = b"yunque_filter_rules"
PROFILE_META = b"yunque_filter_profile"
SAMPLE_N = 5
SAMPLE_CHARS = 300
LANGID = "langid"


def metrics_table(doc_ids: pa.Array, sources: pa.Array, reasons: Sequence[str | None], langs: Sequence[str],
                  scores: Sequence[float], rules: Sequence[RuleSpec], metrics: dict[str, list[float | None]],
                  profile: dict[str, Any]) -> pa.Table:
    """The per-document side table of one shard; `metrics[reason]` holds one value per
    document (None where the rule never ran)."""
    cols: dict[str, pa.Array] = {
        "doc_id": doc_ids, "source": sources,
        "kept": pa.array([r is None for r in reasons], pa.bool_()),
        "reason": pa.array(list(reasons), pa.string()),
        "lang": pa.array(list(langs), pa.string()),
        "lang_score": pa.array(list(scores), pa.float32()),
    }
    for rule in rules:
        cols[rule.reason] = pa.array(metrics.get(rule.reason, [None] * len(reasons)), pa.float64())
    meta = {RULES_META: json.dumps([dataclasses.asdict(r) for r in rules]).encode(),
            PROFILE_META: json.dumps(profile, default=str).encode()}
    return pa.table(cols).replace_schema_metadata(meta)


def fails(values: np.ndarray, rule: RuleSpec) -> np.ndarray:
    """Which values fail the rule: `pipelines.data.filters.rules.fails` over an array (NaN
    fails nothing). A document whose outcome names the rule is counted as failing it
    whatever its value, so `fails >= dropped` holds even if the two ever disagree."""
    if rule.threshold is None:
        return np.zeros(len(values), bool)
    with np.errstate(invalid="ignore"):
        if rule.drop_if == "below":
            return values < rule.threshold
        if rule.drop_if == "above":
            return values > rule.threshold
        return values >= rule.threshold  # flag: a 0/1 metric, threshold 1


@dataclass
class RuleRow:
    reason: str
    metric: str
    drop_if: str
    threshold: float | None
    measured: int  # documents with a finite value
    fails: int  # documents that fail the rule, wherever it stands in the order
    dropped: int  # documents whose first failing rule is this one
    p5: float | None = None
    median: float | None = None
    p95: float | None = None

    def row(self) -> dict[str, Any]:
        return {"reason": self.reason, "metric": self.metric,
                "threshold": "off" if self.threshold is None else f"{self.drop_if} {self.threshold:g}",
                "dropped": self.dropped, "fails": self.fails, "passes": self.measured - self.fails,
                "measured": self.measured, "p5": _num(self.p5), "median": _num(self.median), "p95": _num(self.p95)}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


@dataclass
class FilterReport:
    shard: str
    docs_in: int
    kept: int
    rules: list[RuleRow]
    values: dict[str, np.ndarray]  # finite values per rule reason, for the histograms
    langid: dict[str, Any]  # drops per language-ID reason, documents per language
    profile: dict[str, Any]
    drops: dict[str, int]  # documents per first failing reason, language ID included
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def accounted(self) -> int:
        """kept + every drop: equals docs_in when no document is counted twice or lost."""
        return self.kept + sum(self.drops.values())


def read_metrics(store: DataStore, shard: str) -> pa.Table | None:
    path = store.dir("filtered_documents", shard) / FILTER_METRICS
    return pq.read_table(path) if path.exists() else None


def rules_of(table: pa.Table) -> list[RuleSpec]:
    meta = table.schema.metadata or {}
    return [RuleSpec(**d) for d in json.loads(meta.get(RULES_META, b"[]"))]


def profile_of(table: pa.Table) -> dict[str, Any]:
    return json.loads((table.schema.metadata or {}).get(PROFILE_META, b"{}"))


def build(metrics: pa.Table, rejected: pa.Table | None, shard: str, n: int = SAMPLE_N,
          chars: int = SAMPLE_CHARS) -> FilterReport:
    """The report of one shard from its metrics table and its filter-stage rejections."""
    rules = rules_of(metrics)
    reasons = metrics["reason"]
    drops = {str(v["values"]): int(v["counts"]) for v in pc.value_counts(reasons.drop_null()).to_pylist()}
    drops = dict(sorted(drops.items(), key=lambda kv: -kv[1]))
    rows, values = [], {}
    for rule in rules:
        col = metrics[rule.reason].to_numpy(zero_copy_only=False).astype(np.float64)  # nulls -> NaN
        finite = col[np.isfinite(col)]
        first = np.asarray(pc.equal(reasons, rule.reason).fill_null(False))
        failing = int(np.count_nonzero(fails(col, rule) | first))
        spread = len(finite) and rule.drop_if != "flag"  # quantiles of a 0/1 flag say nothing
        q = np.percentile(finite, [5, 50, 95]).tolist() if spread else [None] * 3
        rows.append(RuleRow(rule.reason, rule.metric, rule.drop_if, rule.threshold, len(finite), failing,
                            drops.get(rule.reason, 0), *q))
        values[rule.reason] = finite
    known = {r.reason for r in rules}
    for reason, count in drops.items():  # a reason no rule names (none expected): still shown
        if reason not in known and not reason.startswith(f"{LANGID}:"):
            rows.append(RuleRow(reason, "(no rule spec)", "", None, 0, count, count))
    langs = {str(v["values"]): int(v["counts"]) for v in pc.value_counts(metrics["lang"]).to_pylist()}
    langid = {"drops": {r: c for r, c in drops.items() if r.startswith(f"{LANGID}:")},
              "languages": dict(sorted(langs.items(), key=lambda kv: -kv[1])[:10])}
    report = FilterReport(shard, metrics.num_rows, int(pc.sum(metrics["kept"]).as_py() or 0), rows, values,
                          langid, profile_of(metrics), drops)
    if rejected is not None:
        report.samples = {r: sample(rejected, [r], n, chars) for r in drops}
        attach_values(report.samples, metrics)
    return report


def shard_report(store: DataStore, shard: str, n: int = SAMPLE_N) -> FilterReport | None:
    """The report of a committed filtered_documents shard (None: written before the
    metrics table existed)."""
    metrics = read_metrics(store, shard)
    if metrics is None:
        return None
    path = store.rejected(shard, "filter")
    return build(metrics, pq.read_table(path) if path.exists() else None, shard, n)


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


def families(report: FilterReport) -> dict[str, list[RuleRow]]:
    """Rules grouped by filter ("gopher_quality", ...), in the filters' order: one figure each."""
    out: dict[str, list[RuleRow]] = {}
    for row in report.rules:
        if row.metric != "(no rule spec)":
            out.setdefault(row.reason.split(":")[0], []).append(row)
    return out


def _bins(values: np.ndarray, threshold: float | None) -> tuple[np.ndarray, bool]:
    """30 bins over the values and the threshold; log-spaced when positive values span
    more than two decades (word counts against a 100,000-word limit)."""
    pts = values if threshold is None else np.append(values, threshold)
    lo, hi = (float(pts.min()), float(pts.max())) if len(pts) else (0.0, 1.0)
    if lo > 0 and hi / lo > 100:
        return np.geomspace(lo, hi, 31), True
    return np.linspace(lo, hi if hi > lo else lo + 1, 31), False


def render_histograms(report: FilterReport, directory: Path, dpi: int = 60) -> dict[str, Path]:
    """One PNG per filter (`figure`). Low dpi: each image is stored in the event log and
    sent to every browser that opens the asset."""
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for family, rows in families(report).items():
        fig = figure(report, family, rows, dpi)
        path = directory / f"{report.shard}.{family}.png"
        fig.savefig(path)
        plt.close(fig)
        out[family] = path
    return out


def figure(report: FilterReport, family: str, rows: list[RuleRow], dpi: int = 60):
    """A small histogram per rule of one filter: the threshold as a red dashed line, the
    side it drops shaded, the counts in the title; a 0/1 bar chart for flag rules."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = 3
    nrows = -(-len(rows) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(10, 2.2 * nrows), dpi=dpi, squeeze=False)
    for ax, row in zip(axes.flat, rows):
        vals = report.values.get(row.reason, np.array([]))
        ax.set_title(f"{row.reason.split(':', 1)[-1]}\ndropped {row.dropped}, fails {row.fails} of {row.measured}",
                     fontsize=9)
        if row.drop_if == "flag":
            ones = int(np.count_nonzero(vals >= (row.threshold or 1.0)))
            ax.bar(["0", "1"], [len(vals) - ones, ones], color=["tab:blue", "tab:red"])
        elif len(vals):
            bins, log = _bins(vals, row.threshold)
            ax.hist(vals, bins=bins, color="tab:blue")
            if log:
                ax.set_xscale("log")
        if row.threshold is not None and row.drop_if in ("below", "above"):
            ax.axvline(row.threshold, color="tab:red", ls="--", lw=1.5)
            lo, hi = ax.get_xlim()
            a, b = (lo, row.threshold) if row.drop_if == "below" else (row.threshold, hi)
            ax.axvspan(a, b, color="tab:red", alpha=0.12)
            ax.set_xlim(lo, hi)
        elif row.threshold is None:
            ax.text(0.5, 0.5, "rule off", transform=ax.transAxes, ha="center", color="gray")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle(f"{report.shard}: {family} (red: threshold; shaded: dropped side)", fontsize=10)
    # fixed margins: tight_layout would take a third of the rendering time
    height = 2.2 * nrows
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.3 / height, top=1 - 0.75 / height, hspace=0.8, wspace=0.22)
    return fig


def _quote(text: str | None) -> str:
    if text is None:
        return "(text not kept: undecodable or too large)"
    return text.replace("```", "'''")


def samples_markdown(samples: dict[str, list[dict[str, Any]]], counts: dict[str, int]) -> str:
    """The rejected sample as markdown: per reason, its count, then each document's id,
    source, length, the metric value that dropped it and its first characters."""
    parts = []
    for reason, rows in samples.items():
        parts.append(f"#### `{reason}`: {counts.get(reason, len(rows))} documents, {len(rows)} shown")
        for r in rows:
            value = _value(r)
            parts.append(f"`{r['doc_id'][:12]}` {r['source']} ({r['chars']} chars{value})\n\n"
                         f"```\n{_quote(r['text'])}\n```")
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
        out.append(f"--- {r['doc_id'][:12]}  {r['reason']}  {r['source']}  ({r['chars']} chars{_value(r)}; "
                   f"{r['stage']} stage)")
        if r.get("detail") and r["detail"] != f"{r['source']}: {r['reason']}":  # says more than the header
            out.append(f"    {r['detail']}")
        out.append(r["text"] if r["text"] is not None else "(text not kept: undecodable or too large)")
    return "\n".join(out)
