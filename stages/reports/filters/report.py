"""What the quality filters did to one shard, for a person to judge before trusting them:
per rule, the distribution of its metric against its threshold, how many documents it
dropped (as their first failing rule) and how many fail it at all, and a sample of the
documents each reason rejected.

It reads only `filter_metrics.parquet`, which holds every judged document's metrics and,
in its schema metadata, the rules and profile that judged them. This module counts and
assembles; `metrics`, `samples` and `histograms` beside it write and read the table, pick
the deterministic sample and draw. docs/data.md#quality-filters ("Inspection before trust").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.filters.rules import RuleSpec
from stages.reports.filters.histograms import families, figure, render_histograms, text_histograms
from stages.reports.filters.metrics import (
    FILTER_METRICS,
    PROFILE_META,
    RULES_META,
    metrics_table,
    profile_of,
    read_metrics,
    rules_of,
)
from stages.reports.filters.samples import (
    SAMPLE_CHARS,
    SAMPLE_N,
    attach_values,
    sample,
    samples_markdown,
    terminal_text,
)
from stages.reports.filters.types import FilterReport, RuleRow
from stages.store.outputs import DataStore

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
