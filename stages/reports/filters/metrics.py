"""The filter stage's per-document side table, `filter_metrics.parquet`: building it (one
row per judged document, one float column per rule reason, the rules and profile in the
schema metadata) and reading it back, rules and profile included.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.filters.rules import RuleSpec
from stages.store.outputs import DataStore

FILTER_METRICS = "filter_metrics.parquet"
RULES_META = b"yunque_filter_rules"
PROFILE_META = b"yunque_filter_profile"


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


def read_metrics(store: DataStore, shard: str) -> pa.Table | None:
    path = store.dir("filtered_documents", shard) / FILTER_METRICS
    return pq.read_table(path) if path.exists() else None


def rules_of(table: pa.Table) -> list[RuleSpec]:
    meta = table.schema.metadata or {}
    return [RuleSpec(**d) for d in json.loads(meta.get(RULES_META, b"[]"))]


def profile_of(table: pa.Table) -> dict[str, Any]:
    return json.loads((table.schema.metadata or {}).get(PROFILE_META, b"{}"))
