"""The part of `DataStore` that keeps a home on an object store in step with its local
cache (`stages.store.remote` moves the bytes): which output to bring, when, under which lock.
Every method is a no-op for a local home."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from stages.asset_names import (
    CLEAN_DOCUMENTS,
    DEDUPED_DOCUMENTS,
    FILTERED_DOCUMENTS,
    MINHASH_SIGNATURES,
    RAW_DOCUMENTS,
    TOKEN_SHARDS,
)
from stages.store.integrity import DamagedOutput

MANIFEST = "_manifest.json"
# Per-shard assets: their directory without a shard is a listing, never synced whole.
SHARDED = {"rejected_documents", RAW_DOCUMENTS, CLEAN_DOCUMENTS, FILTERED_DOCUMENTS, DEDUPED_DOCUMENTS,
           MINHASH_SIGNATURES, TOKEN_SHARDS}


class StoreSync:
    """Mixed into DataStore, which provides remote, data, _fresh, _damaged, _rel, _path, lock and staging."""

    def sync(self, asset: str, shard: str | None = None) -> None:
        """Make the local copy of one output the store's committed one (remote homes;
        once per output per instance). A local output the store does not have is not an
        output: it is dropped, and the stage computes it again."""
        if self.remote is None or (asset, shard) in self._fresh or (shard is None and asset in SHARDED):
            return
        if (asset, shard) in self._damaged:  # its pull failed its checksums: not downloaded again
            raise self._damaged[(asset, shard)]
        rel, target = self._rel(asset, shard), self._path(asset, shard)
        with self.lock(asset, shard):
            there = self.remote.manifest(rel)
            local = target / MANIFEST
            here = json.loads(local.read_text()) if local.exists() else None
            if there is not None:
                if (here or {}).get("version") != there.get("version"):
                    try:
                        self.remote.pull_version(rel, there, target, self.staging(), self.data)
                    except DamagedOutput as e:
                        self._damaged[(asset, shard)] = e
                        raise
            elif here is not None:
                shutil.move(str(target), tempfile.mkdtemp(dir=self.staging(), prefix="dropped."))
            elif shard is None:
                self.remote.pull_tree(rel, target)  # a run directory, or nothing yet
        self._fresh.add((asset, shard))

    def drop_local(self, asset: str, shard: str | None = None) -> None:
        """Set the local copy of one output aside, so that the next `sync` brings the
        store's committed version again (a cache found damaged)."""
        target = self._path(asset, shard)
        with self.lock(asset, shard):
            if target.exists():
                shutil.move(str(target), tempfile.mkdtemp(dir=self.staging(), prefix="dropped."))
        self._fresh.discard((asset, shard))

    def fetch_file(self, asset: str, name: str) -> None:
        """Bring one file of a run directory from the store (remote homes), e.g. the launch
        spec another node polls for, without the rest of the directory."""
        if self.remote is None:
            return
        text = self.remote.read_text(f"{self._rel(asset)}/{name}")
        if text is not None:
            path = self._path(asset) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".pull")
            tmp.write_text(text)
            os.replace(tmp, path)

    def inputs_of(self, config: Any) -> None:
        """Bring every output a program's config names (paths under this home's data/:
        token shards, the tokenizer, a checkpoint to start from) into the local copy."""
        if self.remote is None:
            return
        if isinstance(config, dict):
            for k, v in config.items():
                if k != "out":  # the program's own run directory: it writes there
                    self.inputs_of(v)
        elif isinstance(config, list):
            for v in config:
                self.inputs_of(v)
        elif isinstance(config, str) and config.startswith(f"{self.data}/"):
            parts = config[len(str(self.data)) + 1:].split("/")
            self.sync(parts[0], None if parts[0] not in SHARDED else parts[1])

    def publish(self, asset: str) -> None:
        """Upload a run directory that this process wrote to (remote homes; a no-op locally)."""
        if self.remote is None:
            return
        with self.lock(asset):
            self.remote.push_tree(self._rel(asset), self._path(asset))
        self._fresh.add((asset, None))
