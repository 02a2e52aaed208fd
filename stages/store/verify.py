"""A whole home checked against its checksums (`yunque verify`): every committed output
(a directory with a manifest under data/), every byte hashed; on an object store, the
objects of each committed version as the store holds them.

Repair is not done here: `quarantine` takes a damaged output out of the committed tree,
so that the next run of its asset builds it again; even damage that only a full read
sees (same size, same mtime), which the plan's cheap check cannot. In a home on an
object store, that is the store's committed set, so that no cache that still holds a
good copy of the same version keeps trusting the store's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from stages.store.outputs import MANIFEST, DataStore

DAMAGED = "_damaged"  # where quarantined outputs go, under data/
# scratch and bookkeeping under data/, never outputs
NOT_OUTPUTS = {"_staging", "_locks", DAMAGED}


@dataclass(frozen=True)
class Damage:
    asset: str
    shard: str | None
    file: str
    why: str
    in_store: bool  # the object store's copy (else the local home's)

    @property
    def output(self) -> str:
        return f"{self.asset}/{self.shard}" if self.shard else self.asset

    def line(self) -> str:
        where = "in the store" if self.in_store else "here"
        return f"damaged: {self.output} ({self.file}: {self.why}; {where})"


def committed(store: DataStore) -> list[tuple[str, str | None]]:
    """(asset, shard or None) of every committed output: the store's, for a home on an
    object store; the local directory's otherwise."""
    if store.remote is not None:
        rels = store.remote.committed()
    else:
        found = [*store.data.glob(f"*/{MANIFEST}"), *store.data.glob(f"*/*/{MANIFEST}")]
        rels = sorted(p.parent.relative_to(store.home).as_posix() for p in found)
    out = []
    for rel in rels:
        parts = rel.split("/")[1:]
        if parts[0] not in NOT_OUTPUTS:
            out.append((parts[0], parts[1] if len(parts) > 1 else None))
    return out


def check(store: DataStore, asset: str, shard: str | None) -> Damage | None:
    """Every byte of one committed output against its manifest."""
    if store.remote is not None:
        rel = f"data/{asset}/{shard}" if shard else f"data/{asset}"
        m = store.remote.manifest(rel)
        found = store.remote.find_damage(rel, m) if m is not None else None
        return Damage(asset, shard, *found, in_store=True) if found else None
    path = store.data / asset / (shard or "") / MANIFEST
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return Damage(asset, shard, MANIFEST, f"unreadable: {e}", in_store=False)
    why = store.damage(asset, shard, m, full=True)
    if why is None:
        return None
    name, _, reason = why.partition(": ")
    return Damage(asset, shard, name, reason, in_store=False)


def verify_home(store: DataStore, progress: Callable[[int, int, str], None] | None = None) -> tuple[int, list[Damage]]:
    """(outputs checked, the damaged ones)."""
    outputs = committed(store)
    damaged = []
    for i, (asset, shard) in enumerate(outputs):
        if progress is not None:
            progress(i, len(outputs), f"{asset}/{shard}" if shard else asset)
        if d := check(store, asset, shard):
            damaged.append(d)
    return len(outputs), damaged


def quarantine(store: DataStore, damage: Damage) -> None:
    """Make a damaged output one that the next run of its asset builds again, whatever
    check that run makes: the output leaves the committed tree for
    `data/_damaged/<asset>/<shard or _>/<time>/` (kept for a look; safe to delete), so
    no reader finds its files where outputs live. In an object store, that is the store's
    tree, so that every cache drops its copy."""
    rel = f"data/{damage.asset}/{damage.shard}" if damage.shard else f"data/{damage.asset}"
    if damage.in_store and store.remote is not None:
        store.remote.quarantine(rel)
        return
    with store.lock(damage.asset, damage.shard):
        source = store.home / rel
        if source.exists():
            dest = store.data / DAMAGED / damage.asset / (damage.shard or "_") / time.strftime("%Y%m%dT%H%M%S")
            dest.parent.mkdir(parents=True, exist_ok=True)
            source.rename(dest)
