"""The cache keys every memoised stage is built on: a hash of its parts; a stage's key
from its code version (`stages.store.versions`), the configuration sections it reads and
its inputs' keys; and an input's committed key, read from its manifest."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from stages.store.versions import CODE_VERSIONS

if TYPE_CHECKING:
    from stages.config import YunqueConfig
    from stages.store.outputs import DataStore


def cache_key(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def stage_key(asset: str, cfg: YunqueConfig, sections: tuple[str, ...], *upstream: str) -> str:
    """A data stage's key: its code version, the configuration sections it reads, and its
    inputs' keys."""
    return cache_key(asset, CODE_VERSIONS[asset], cfg.section_hash(*sections) if sections else "", *upstream)


def upstream_key(store: DataStore, asset: str, shard: str | None) -> str:
    m = store.manifest(asset, shard)
    if m is None:
        where = f"{asset}/{shard}" if shard else asset
        again = f"yunque run --select 'key:{asset}'" + (f", or Materialize for partition {shard} in the UI" if shard else "")
        raise FileNotFoundError(f"{where} has no output in the store (no manifest under {store.dir(asset, shard)}): "
                                f"it was never materialized, or its data was lost since; materialize it again "
                                f"({again})")
    return m["key"]
