"""The two questions every joining stage asks, each with one answer:

* which shards does a stage consume? (`consumed_shards`)
* which checkpoint does a stage start from, evaluate or export? (`consumed_checkpoint`)

Assets call these (through `assets.partitions.consumed_shards` for the Dagster side of
the first); nothing else decides either question.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from model.checkpoint_files import Checkpoint, latest
from stages.store import DataStore


@dataclass
class ShardSelection:
    ready: list[str]  # consumed: registered, still in the corpus, upstream output committed
    pending: list[str] = field(default_factory=list)  # registered and present, upstream not yet materialized
    gone: list[str] = field(default_factory=list)  # registered but no longer in the corpus


def consumed_shards(store: DataStore, upstream: str, registered: Iterable[str],
                    present: Iterable[str]) -> ShardSelection:
    """The shards a whole-corpus stage reads from the per-shard asset `upstream`: those
    registered as partitions that are still in the corpus (a vanished shard's documents
    must not keep, drop or train anyone) and whose `upstream` output is committed."""
    present = set(present)
    registered = list(dict.fromkeys(registered))
    live = [s for s in registered if s in present]
    ready = [s for s in live if store.manifest(upstream, s) is not None]
    return ShardSelection(ready=ready, pending=[s for s in live if s not in ready],
                          gone=sorted(set(registered) - present))


def consumed_checkpoint(store: DataStore, asset: str) -> Checkpoint | None:
    """The checkpoint of training asset `asset` that later stages consume: its newest
    intact one (every checksum verified; a corrupted newest one is skipped with a warning)."""
    directory = store.dir(asset)
    return latest(directory) if directory.exists() else None
