"""Where stage outputs live under `$YUNQUE_HOME/data`, written atomically, with a manifest
that makes every per-shard stage a memoised function of its inputs.

Layout (documented in the README):
    data/<asset>/<shard>/part-0.parquet     per-shard assets
    data/<asset>/<shard>/_manifest.json     cache key + stats of the last materialization
    data/rejected_documents/<shard>/<stage>.parquet
    data/dedup_index/...                    whole-corpus asset
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.documents import REJECT_SCHEMA

MANIFEST = "_manifest.json"
PART = "part-0.parquet"


def default_home() -> Path:
    return Path(os.environ.get("YUNQUE_HOME", ".yunque")).absolute()


def cache_key(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class StageStats:
    """What a stage reports; becomes Dagster metadata."""

    key: str
    docs_in: int = 0
    docs_out: int = 0
    rejected: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        d = self.__dict__.copy()
        d.pop("cached")
        return d


class DataStore:
    def __init__(self, home: str | Path | None = None):
        self.home = Path(home).absolute() if home else default_home()
        self.data = self.home / "data"

    def dir(self, asset: str, shard: str | None = None) -> Path:
        return self.data / asset / shard if shard else self.data / asset

    def part(self, asset: str, shard: str) -> Path:
        return self.dir(asset, shard) / PART

    def rejected(self, shard: str, stage: str) -> Path:
        return self.dir("rejected_documents", shard) / f"{stage}.parquet"

    def manifest(self, asset: str, shard: str | None = None) -> dict[str, Any] | None:
        path = self.dir(asset, shard) / MANIFEST
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def cached(self, asset: str, shard: str | None, key: str) -> StageStats | None:
        """The previous stats if the last run had the same key and its files still exist."""
        m = self.manifest(asset, shard)
        if not m or m.get("key") != key:
            return None
        if not all((self.dir(asset, shard) / f).exists() for f in m.get("files", [])):
            return None
        if not all(Path(p).exists() for p in m.get("side_files", [])):
            return None
        stats = StageStats(**m["stats"])
        stats.cached = True
        return stats

    def commit(
        self,
        asset: str,
        shard: str | None,
        stats: StageStats,
        tables: dict[str, pa.Table],
        side: dict[Path, pa.Table] | None = None,
        extra_files: dict[str, str] | None = None,
    ) -> None:
        """Write `tables` (file name -> table) into the asset directory as one atomic swap,
        side tables (rejections) next, and the manifest last: a crash at any point leaves
        the previous manifest, so the stage simply runs again."""
        final = self.dir(asset, shard)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        for name, table in tables.items():
            pq.write_table(table, tmp / name, compression="zstd")
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
        side = side or {}
        for path, table in side.items():
            write_parquet(path, table)
        manifest = {
            "key": stats.key,
            "files": sorted([*tables, *(extra_files or {})]),
            "side_files": sorted(str(p) for p in side),
            "stats": stats.to_json(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    return pq.read_table(path, columns=columns)


def empty_rejections() -> pa.Table:
    return REJECT_SCHEMA.empty_table()


def drop_counts(reasons: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
