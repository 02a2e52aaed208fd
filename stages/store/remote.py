"""A Yunque home on an object store (`s3://bucket/prefix`, or any fsspec URL), seen
through a local cache: stages compute on local files (token arrays are memory-mapped,
parquet is read in row groups) and the store is the truth that every machine shares.

Memoised outputs are immutable versions: a commit uploads a fresh version prefix, then
writes the manifest that names it (one PUT, the commit point), so a reader never sees a
mix and the last manifest wins. Run directories (checkpoints, reports, exports) are
mirrored file by file, checksums.json last. The cache is `$YUNQUE_CACHE` or
`~/.cache/yunque/<scheme>/<bucket>/<prefix>` (`stages.store.location.local_root`). docs/deploy.md#the-home-on-object-storage.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pipelines.s3_outage import patient
from stages.store import integrity

MANIFEST = "_manifest.json"
SYNCED = "_synced.json"  # local only: the tree as last seen in sync with the store
SIDE = "_side"  # inside a version: side files, by their path under data/
LAST = ("checksums.json", "run.json", "materialized.json")  # written after the files they vouch for
SMALL = 8 << 20  # files up to this size are compared by content, larger ones by size


def is_url(home: str | Path) -> bool:
    """A remote home: a URL with a scheme other than file://."""
    s = str(home)
    return "://" in s and not s.startswith("file://")


def storage_options(url: str) -> dict[str, Any]:
    """fsspec options from the environment only (credentials never come from files we
    write): YUNQUE_S3_ENDPOINT for S3-compatible stores; the rest is the client's own
    chain (AWS_* variables, profiles, instance roles)."""
    endpoint = os.environ.get("YUNQUE_S3_ENDPOINT", "")
    if url.startswith(("s3://", "s3a://")) and endpoint:
        return {"client_kwargs": {"endpoint_url": endpoint}}
    return {}


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class RemoteHome:
    def __init__(self, url: str, local: Path):
        import fsspec

        self.url = url.rstrip("/")
        self.local = local
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options(self.url))
        patient(self.fs)  # a store that restarts is waited for (pipelines.s3_outage)

    def _r(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def _read_json(self, rel: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(self._r(rel), "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None

    def _write_json(self, rel: str, obj: dict[str, Any]) -> None:
        with self.fs.open(self._r(rel), "wb") as f:
            f.write(json.dumps(obj, indent=1, sort_keys=True).encode())

    def read_text(self, rel: str) -> str | None:
        try:
            with self.fs.open(self._r(rel), "rb") as f:
                return f.read().decode()
        except FileNotFoundError:
            return None

    def write_text(self, rel: str, text: str) -> None:
        try:
            with self.fs.open(self._r(rel), "wb") as f:
                f.write(text.encode())
        except FileNotFoundError as e:  # s3fs names no path ("The specified bucket does not exist")
            raise FileNotFoundError(errno.ENOENT, str(e), f"{self.url}/{rel}") from e

    # -- memoised outputs: versions and a manifest ------------------------------------

    def manifest(self, rel: str) -> dict[str, Any] | None:
        self.fs.invalidate_cache(self._r(rel))
        return self._read_json(f"{rel}/{MANIFEST}")

    def push_version(self, rel: str, directory: Path, manifest: dict[str, Any], data: Path) -> None:
        """Upload `directory` (and the manifest's side files, absolute local paths under
        `data`) as version manifest["version"], then commit it by writing the manifest."""
        version = manifest["version"]
        old = self.manifest(rel)
        prefix = f"{rel}/{version}"
        for p in sorted(directory.iterdir()):
            if p.name != MANIFEST:
                self.fs.put_file(str(p), self._r(f"{prefix}/{p.name}"))
        side = []
        for s in manifest.get("side_files", []):
            relside = Path(s).relative_to(data).as_posix()
            self.fs.put_file(s, self._r(f"{prefix}/{SIDE}/{relside}"))
            side.append(relside)
        remote = {**manifest, "side_files": side, "previous": (old or {}).get("version")}
        self._write_json(f"{rel}/{MANIFEST}", remote)
        stale = (old or {}).get("previous")
        if stale and stale != version:
            self.fs.rm(self._r(f"{rel}/{stale}"), recursive=True)

    def pull_version(self, rel: str, manifest: dict[str, Any], target: Path, staging: Path, data: Path) -> None:
        """Download the committed version named by `manifest` into `target` (swapped in
        whole, like a local commit) and its side files to their places under `data`."""
        version = manifest["version"]
        tmp = Path(tempfile.mkdtemp(dir=staging, prefix="pull."))
        sides = Path(tempfile.mkdtemp(dir=staging, prefix="pull-side."))  # checked before they replace the local ones
        try:
            for name in manifest.get("files", []):
                self.fs.get_file(self._r(f"{rel}/{version}/{name}"), str(tmp / name))
            pulled = {}
            for relside in manifest.get("side_files", []):
                pulled[relside] = sides / relside
                pulled[relside].parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(self._r(f"{rel}/{version}/{SIDE}/{relside}"), str(pulled[relside]))
            local = dict(manifest)
            # older versions have no checksums: the local copy is then rebuilt
            found = integrity.CHECKSUMS in manifest and integrity.find_damage(
                {**integrity.expand(tmp, manifest.get("files", [])), **pulled}, manifest, full=True)
            if found:
                raise integrity.DamagedOutput(
                    f"{self.url}/{rel}/{version}: {found[0]} is damaged in the store ({found[1]}): it is not "
                    f"used; rebuild it with `yunque verify --repair`", found[0], f"in the store: {found[1]}")
            side = []
            for relside, path in pulled.items():
                dest = data / relside
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, dest)  # keeps its mtime
                side.append(str(dest))
            local["side_files"] = side
            if integrity.CHECKSUMS in manifest:
                paths = {**integrity.expand(tmp, manifest.get("files", [])),
                         **{r: data / r for r in manifest.get("side_files", [])}}
                local[integrity.CHECKSUMS] = integrity.restamp(manifest[integrity.CHECKSUMS], paths)
            (tmp / MANIFEST).write_text(json.dumps(local, indent=1, sort_keys=True))
            old = None
            if target.exists():
                old = Path(tempfile.mkdtemp(dir=staging, prefix="old.")) / target.name
                target.rename(old)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(target)
            tmp = None
            if old is not None:
                shutil.rmtree(old.parent, ignore_errors=True)
        finally:
            shutil.rmtree(sides, ignore_errors=True)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def committed(self) -> list[str]:
        """The outputs committed in the store: `data/<asset>[/<shard>]` with a manifest."""
        base = self._r("data")
        self.fs.invalidate_cache(base)
        found = [*self.fs.glob(f"{base}/*/{MANIFEST}"), *self.fs.glob(f"{base}/*/*/{MANIFEST}")]
        return sorted("data/" + posixpath.relpath(posixpath.dirname(p), base) for p in found)

    def find_damage(self, rel: str, manifest: dict[str, Any]) -> tuple[str, str] | None:
        """(file, why) of the first object of a committed version that does not match its
        manifest's checksums (every byte read from the store), or None."""
        checks = manifest.get(integrity.CHECKSUMS)
        if checks is None:
            return (MANIFEST, "no checksums (written before they were recorded)")
        version = manifest["version"]
        side = set(manifest.get("side_files", []))
        objects = {n: f"{rel}/{version}/{SIDE}/{n}" if n in side else f"{rel}/{version}/{n}" for n in checks}
        for name, obj in sorted(objects.items()):
            rec = checks.get(name, {})
            try:
                size = self.fs.info(self._r(obj))["size"]
            except FileNotFoundError:
                return (name, "missing")
            if size != rec.get("size"):
                return (name, f"size {size:,} bytes, committed {rec.get('size', 0):,}")
            with self.fs.open(self._r(obj), "rb") as f:
                if integrity.stream_checksum(f) != rec.get(integrity.ALGORITHM):
                    return (name, "checksum")
        return None

    def quarantine(self, rel: str) -> None:
        """Take a damaged output out of the store's committed tree: everything under
        `data/<asset>[/<shard>]` moves to `data/_damaged/<asset>/<shard or _>/<time>/` (kept
        for a look), so every cache drops its copy and the next run builds it again."""
        parts = rel.split("/")[1:]
        dest = f"data/_damaged/{parts[0]}/{parts[1] if len(parts) > 1 else '_'}/{time.strftime('%Y%m%dT%H%M%S')}"
        base = self._r(rel)
        self.fs.invalidate_cache(base)
        for key in sorted(self.fs.find(base), key=lambda k: not k.endswith(f"/{MANIFEST}")):  # the commit point first
            self.fs.mv(key, self._r(f"{dest}/{posixpath.relpath(key, base)}"))
        self.fs.invalidate_cache(base)

    # -- run directories: trees mirrored file by file ---------------------------------

    def _remote_files(self, rel: str) -> dict[str, dict[str, Any]]:
        base = self._r(rel)
        self.fs.invalidate_cache(base)
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        return {posixpath.relpath(k, base): v for k, v in found.items() if v.get("type", "file") == "file"}

    @staticmethod
    def _local_files(directory: Path) -> dict[str, Path]:
        if not directory.is_dir():
            return {}
        return {p.relative_to(directory).as_posix(): p for p in directory.rglob("*")
                if p.is_file() and p.name != SYNCED and not p.name.endswith((".tmp", ".pull"))}

    @staticmethod
    def _same(local: Path, info: dict[str, Any]) -> bool:
        size = local.stat().st_size
        if size != info.get("size"):
            return False
        if size > SMALL:
            return True  # large files (weights, token arrays) are immutable under their name
        etag = str(info.get("ETag", info.get("etag", ""))).strip('"')
        return len(etag) == 32 and etag == _md5(local)  # no md5 ETag (multipart, other stores): transfer

    @staticmethod
    def _synced(directory: Path) -> dict[str, int]:
        path = directory / SYNCED
        return json.loads(path.read_text()) if path.exists() else {}

    @staticmethod
    def _order(names: list[str]) -> list[str]:
        return sorted(names, key=lambda n: (posixpath.basename(n) in LAST, n))

    def push_tree(self, rel: str, directory: Path) -> None:
        local = self._local_files(directory)
        if not local:
            return
        remote = self._remote_files(rel)
        for name in self._order(list(local)):
            if name not in remote or not self._same(local[name], remote[name]):
                self.fs.put_file(str(local[name]), self._r(f"{rel}/{name}"))
        # gone here since the last sync (a run archived to previous/): gone there too;
        # files written there by others (another node's checkpoints) are not ours to delete
        for name in set(self._synced(directory)) - set(local):
            if name in remote:
                self.fs.rm_file(self._r(f"{rel}/{name}"))
        self._write_synced(directory, local)

    def pull_tree(self, rel: str, directory: Path) -> None:
        remote = self._remote_files(rel)
        synced = self._synced(directory)
        local = self._local_files(directory)
        for name in self._order(list(remote)):
            mine = local.get(name)
            changed_here = mine is not None and synced.get(name) != mine.stat().st_size
            if mine is None or (not changed_here and not self._same(mine, remote[name])):
                dest = directory / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                part = dest.with_name(dest.name + ".pull")
                self.fs.get_file(self._r(f"{rel}/{name}"), str(part))
                os.replace(part, dest)
        for name, size in synced.items():  # removed there since the last sync, untouched here
            p = directory / name
            if name not in remote and p.is_file() and p.stat().st_size == size:
                p.unlink()
        if remote or synced:
            self._write_synced(directory, self._local_files(directory))

    @staticmethod
    def _write_synced(directory: Path, files: dict[str, Path]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / (SYNCED + ".tmp")
        tmp.write_text(json.dumps({n: p.stat().st_size for n, p in files.items()}, sort_keys=True))
        os.replace(tmp, directory / SYNCED)


def new_version(key: str) -> str:
    """A version name no other writer can pick: the cache key (readable) and a random tail."""
    return f"v-{key}-{uuid.uuid4().hex[:8]}"
