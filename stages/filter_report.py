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

This module counts (per rule and per reason) and assembles the report; the side table is
written and read by `stages.filter_metrics`, the sample picked and rendered by
`stages.filter_samples`, the histograms drawn by `stages.filter_histograms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.filters.rules import RuleSpec
from stages.filter_histograms import families, figure, render_histograms, text_histograms
from stages.filter_metrics import (
    FILTER_METRICS,
    PROFILE_META,
    RULES_META,
    metrics_table,
    profile_of,
    read_metrics,
    rules_of,
)
from stages.filter_samples import (
    SAMPLE_CHARS,
    SAMPLE_N,
    attach_values,
    sample,
    samples_markdown,
    terminal_text,
)
from stages.store import DataStore

LANGID = "langid"

# The report's whole interface, as before it was split: callers import all of it from here.
__all__ = [
    "FILTER_METRICS",
    "LANGID",
    "PROFILE_META",
    "RULES_META",
    "SAMPLE_CHARS",
    "SAMPLE_N",
    "FilterReport",
    "RuleRow",
    "attach_values",
    "build",
    "fails",
    "families",
    "figure",
    "metrics_table",
    "pooled_report",
    "profile_of",
    "read_metrics",
    "render_histograms",
    "rules_of",
    "sample",
    "samples_markdown",
    "shard_report",
    "terminal_text",
    "text_histograms",
]


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


def pooled_report(store: DataStore, shards: list[str], label: str) -> FilterReport | None:
    """One report over several committed shards, their metrics tables stacked (no rejected
    sample: `yunque inspect rejected` has it). Shards filtered under other rules than the
    first one's are left out, since their thresholds would not match the figure's.
    None: no shard has a metrics table."""
    tables = [t for s in shards if (t := read_metrics(store, s)) is not None]
    if not tables:
        return None
    first = (tables[0].schema.metadata or {}).get(RULES_META)
    same = [t for t in tables if (t.schema.metadata or {}).get(RULES_META) == first]
    metrics = pa.concat_tables(same, promote_options="default").replace_schema_metadata(tables[0].schema.metadata)
    return build(metrics, None, label)
