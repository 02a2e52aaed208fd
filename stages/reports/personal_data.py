"""Personal data across the corpus: totals per kind and a per-shard plot, from each
shard's filtered_documents stats (counts only; no value is ever stored to read back)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.data.pii import KINDS
from stages.store.outputs import DataStore

# Shards drawn at most: the plot shows the ones with the most values, the table all totals.
PLOT_SHARDS = 40


@dataclass
class CorpusPii:
    per_shard: dict[str, dict[str, int]]  # shard -> kind -> values found
    documents: dict[str, int]  # shard -> documents that held any

    @property
    def totals(self) -> dict[str, int]:
        return {k: sum(c.get(k, 0) for c in self.per_shard.values()) for k in KINDS}

    def markdown(self, actions: dict[str, str]) -> str:
        rows = [f"| {k} | {n:,} | {actions.get(k, 'redact')} |" for k, n in self.totals.items()]
        held = sum(self.documents.values())
        head = (f"Values found in {held:,} documents of {len(self.per_shard):,} shards "
                "(counts only; values are never stored).")
        return "\n".join([head, "",
                          "| kind | values | action |", "|---|---:|---|", *rows])


def corpus_pii(store: DataStore, shards: list[str]) -> CorpusPii:
    per_shard, documents = {}, {}
    for shard in shards:
        m = store.manifest("filtered_documents", shard)
        extra = (m or {}).get("stats", {}).get("extra", {})
        per_shard[shard] = {k: int(v) for k, v in extra.get("pii", {}).items()}
        documents[shard] = int(extra.get("pii_documents", 0))
    return CorpusPii(per_shard, documents)


def plot(found: CorpusPii, path: Path) -> Path | None:
    """A stacked bar per shard (values per kind); None when the corpus held none."""
    if not any(found.totals.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = sorted(found.per_shard, key=lambda s: -sum(found.per_shard[s].values()))[:PLOT_SHARDS]
    shards = sorted(ranked)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * len(shards) + 2), 3.2), dpi=80)
    bottom = [0] * len(shards)
    for kind in KINDS:
        heights = [found.per_shard[s].get(kind, 0) for s in shards]
        if any(heights):
            ax.bar(range(len(shards)), heights, bottom=bottom, label=kind)
            bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(range(len(shards)), shards, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("values replaced or found")
    more = f" (the {PLOT_SHARDS} with most)" if len(found.per_shard) > PLOT_SHARDS else ""
    ax.set_title(f"Personal data per shard{more}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
