"""Where stage outputs live under `$YUNQUE_HOME/data`, written atomically, with a manifest
that makes every per-shard stage a memoised function of its inputs.

Each output is `data/<asset>[/<shard>]/` with its `_manifest.json` (the cache key and the
stats of the last materialization); writes go through `data/_staging/`. Two writers of
one output take turns on an `fcntl.flock` under `data/_locks/`, and the second finds the
first one's output in the cache. A home on an object store is used through a local cache
of the same layout (`stages.store.remote`). docs/operations.md#where-everything-lands.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.asset_names import CLEAN_DOCUMENTS, DEDUPED_DOCUMENTS, FILTERED_DOCUMENTS, RAW_DOCUMENTS
from stages.store import integrity
from stages.store import remote as remote_home
from stages.store.location import home_url, local_root
from stages.store.sync import StoreSync

if TYPE_CHECKING:
    import pyarrow as pa

MANIFEST = "_manifest.json"
PART = "part-0.parquet"
READ_BATCH = 1024  # documents per batch read from a part (and per encode call of the tokenizer)

log = logging.getLogger(__name__)

# Locks this thread holds, by lock file, with their depth: `lock()` is re-entrant within a
# thread (a stage holds it around check -> compute -> commit, and `commit` takes it
# again), while other threads and processes each open their own file description, on
# which flock excludes them.
_held = threading.local()


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


# The side files (`rejected(shard, stage)`) belong to these assets' versions.
REJECTED_BY = {"read": RAW_DOCUMENTS, "clean": CLEAN_DOCUMENTS, "filter": FILTERED_DOCUMENTS,
               "dedup": DEDUPED_DOCUMENTS}


class DataStore(StoreSync):
    def __init__(self, home: str | Path | None = None):
        url = str(home) if home else home_url()
        self.remote: remote_home.RemoteHome | None = None
        if remote_home.is_url(url):
            self.url = url.rstrip("/")
            self.home = local_root(url)
            self.remote = remote_home.RemoteHome(url, self.home)
        else:
            self.home = Path(url.removeprefix("file://")).absolute()
            self.url = str(self.home)
        self.data = self.home / "data"
        self._fresh: set[tuple[str, str | None]] = set()  # synced with the store by this instance
        # outputs whose committed version failed its checksums when pulled, with the error
        self._damaged: dict[tuple[str, str | None], integrity.DamagedOutput] = {}

    def _path(self, asset: str, shard: str | None = None) -> Path:
        return self.data / asset / shard if shard else self.data / asset

    def _rel(self, asset: str, shard: str | None = None) -> str:
        return f"data/{asset}/{shard}" if shard else f"data/{asset}"

    def remote_url(self, asset: str) -> str:
        """Where a run directory lives in the store ("" for a local home)."""
        return f"{self.url}/{self._rel(asset)}" if self.remote is not None else ""

    def dir(self, asset: str, shard: str | None = None) -> Path:
        self.sync(asset, shard)
        return self._path(asset, shard)

    def part(self, asset: str, shard: str) -> Path:
        """The table of a per-shard output, for a stage to read: verified first."""
        return self.verified(asset, shard) / PART

    def rejected(self, shard: str, stage: str) -> Path:
        if stage in REJECTED_BY:
            self.sync(REJECTED_BY[stage], shard)
        return self._path("rejected_documents", shard) / f"{stage}.parquet"

    def manifest(self, asset: str, shard: str | None = None) -> dict[str, Any] | None:
        path = self.dir(asset, shard) / MANIFEST
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def cached(self, asset: str, shard: str | None, key: str) -> StageStats | None:
        """The previous stats if the last run had the same key and its files (side files
        included) are still the ones it committed (`damage`): a crash between writing a
        side file and swapping the asset directory, or a file damaged since, is a miss."""
        try:
            m = self.manifest(asset, shard)
        except integrity.DamagedOutput:
            return None  # damaged in the store: a miss, which the stage builds again
        if not m or m.get("key") != key or self.damage(asset, shard, m) is not None:
            return None
        stats = StageStats(**m["stats"])
        stats.cached = True
        return stats

    def _files(self, asset: str, shard: str | None, m: dict[str, Any]) -> dict[str, Path]:
        """Each file a manifest commits, by its name in the checksums, where it is here (a
        side file under this home's data/, wherever the home was when it was committed)."""
        directory = self._path(asset, shard)
        out = integrity.expand(directory, m.get("files", []))
        out.update({(rel := self._side_rel(Path(p))): self.data / rel for p in m.get("side_files", [])})
        return out

    def _side_rel(self, path: Path) -> str:
        """A side file's path under data/: `rejected_documents/<shard>/<stage>.parquet`.
        Manifests name side files by their absolute path: a home moved (or reached through
        another mount) since keeps the last three parts."""
        try:
            return path.relative_to(self.data).as_posix()
        except ValueError:
            return "/".join(path.parts[-3:])

    def damage(self, asset: str, shard: str | None = None, m: dict[str, Any] | None = None,
               full: bool = False) -> str | None:
        """Why a committed output is damaged ("part-0.parquet: checksum"), or None when
        its files match the manifest. The cheap check (sizes, and the content of a file
        whose mtime moved) unless `full`, which hashes every byte. No manifest: None."""
        m = m if m is not None else self.manifest(asset, shard)
        if m is None:
            return None
        found = integrity.find_damage(self._files(asset, shard, m), m, full=full)
        return f"{found[0]}: {found[1]}" if found else None

    def verified(self, asset: str, shard: str | None = None) -> Path:
        """The directory of a committed output whose every file matches its checksum, for
        a stage about to read it; a damaged one raises `DamagedOutput`, naming the output,
        the file and what to run, instead of being read."""
        directory = self.dir(asset, shard)
        where = f"{asset}/{shard}" if shard else asset
        m = self.manifest(asset, shard)
        if m is None:
            raise FileNotFoundError(f"{where} has no committed output (no manifest under {directory}): materialize "
                                    f"it first (yunque run --select 'key:{asset}')")
        why = self.damage(asset, shard, m, full=True)
        if why and self.remote is not None:
            # the local cache is damaged, not necessarily the store: drop it and bring the
            # committed version again (verified as it comes)
            self.drop_local(asset, shard)
            directory = self.dir(asset, shard)
            m = self.manifest(asset, shard)
            why = None if m is None else self.damage(asset, shard, m, full=True)
        if why:
            name, _, reason = why.partition(": ")
            path = self._files(asset, shard, m).get(name, directory / name)
            ui = f"Materialize {asset}" + (f" for partition {shard}" if shard else "")
            raise integrity.DamagedOutput(
                f"{where} is damaged: {path} ({reason}); it is not read. Rebuild it with `yunque verify --repair` "
                f"(or {ui} in the UI), then run this again", name, reason)
        return directory

    def lock_path(self, asset: str, shard: str | None = None) -> Path:
        # Outside the asset directories, which `commit` renames away, and never deleted:
        # removing a lock file while another process waits on it would give two holders.
        return self.data / "_locks" / asset / f"{shard}.lock" if shard else self.data / "_locks" / f"{asset}.lock"

    @contextlib.contextmanager
    def lock(self, asset: str, shard: str | None = None) -> Iterator[None]:
        """Hold the exclusive writer lock of one output (per-shard, or whole-corpus when
        `shard` is None) until the block ends; blocks while another thread or process
        holds it. Re-entrant within one thread. Covers the output directory and its side
        files (`rejected_documents/<shard>/<stage>.parquet` belongs to one asset)."""
        path = self.lock_path(asset, shard)
        held: dict[str, int] = _held.__dict__.setdefault("depth", {})
        name = str(path)
        if held.get(name):
            held[name] += 1
            try:
                yield
            finally:
                held[name] -= 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                where = f"{asset}/{shard}" if shard else asset
                log.info("%s: another writer holds %s; waiting for it", where, path)
                fcntl.flock(fd, fcntl.LOCK_EX)
            held[name] = 1
            try:
                yield
            finally:
                del held[name]
        finally:
            os.close(fd)  # releases the flock

    def holds_lock(self, asset: str, shard: str | None = None) -> bool:
        """Whether this thread holds `lock(asset, shard)`."""
        return bool(_held.__dict__.get("depth", {}).get(str(self.lock_path(asset, shard))))

    def _committed(self, asset: str, shard: str | None, manifest: dict[str, Any]) -> bool:
        """The output is already there: same key, same stats (a forced rebuild under the
        same key, like a tokenizer retrained on more shards, reports other stats), and
        complete (its files and side files)."""
        try:
            m = self.manifest(asset, shard)
        except integrity.DamagedOutput:
            return False
        ours = json.loads(json.dumps(manifest["stats"]))  # as it would read back (tuples become lists)
        return m is not None and m.get("stats") == ours and self.cached(asset, shard, manifest["key"]) is not None

    def staging(self) -> Path:
        """Scratch space for atomic writes, outside every asset directory so that no glob
        over the outputs ever sees a half-written or superseded file."""
        path = self.data / "_staging"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def commit(
        self,
        asset: str,
        shard: str | None,
        stats: StageStats,
        tables: dict[str, pa.Table],
        side: dict[Path, pa.Table] | None = None,
        extra_files: dict[str, str] | None = None,
        write: Callable[[Path], list[str]] | None = None,
    ) -> None:
        """Write `tables` (file name -> table) as the new asset directory in one rename,
        after the side tables (rejections), which are each replaced in one rename too and
        carry the cache key. The manifest lives inside the directory, so readers see the
        old state or the new one, and a crash at any point makes the next run recompute.
        `write(directory)` writes files of other formats there and returns their names.

        Safe with concurrent writers: the side files and the swap happen under
        `lock(asset, shard)`, and a writer that does not hold that lock already and finds
        the same output committed (key, stats, files and side files) discards its copy
        and leaves the output alone."""
        final = self._path(asset, shard)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=self.staging(), prefix=f"{asset}.{shard or '_'}."))
        leftover: Path | None = tmp  # removed on every way out but the swap (token arrays can be gigabytes)
        try:
            import pyarrow.parquet as pq  # loaded when a stage writes, not when the code location loads

            for name, table in tables.items():
                pq.write_table(table, tmp / name, compression="zstd")
            for name, text in (extra_files or {}).items():
                (tmp / name).write_text(text)
            written = write(tmp) if write is not None else []
            side = side or {}
            files = sorted([*tables, *(extra_files or {}), *written])
            manifest = {
                "key": stats.key,
                "files": files,
                "side_files": sorted(str(p) for p in side),
                "stats": stats.to_json(),
            }
            if self.remote is not None:
                manifest["version"] = remote_home.new_version(stats.key)
            own = integrity.records(tmp, files, {})  # hashed outside the lock (token arrays are large)
            # A caller that holds the lock checked the cache under it: an output with this key
            # there is one it judged unusable (say, a truncated token array), so it is replaced.
            checked = self.holds_lock(asset, shard)
            with self.lock(asset, shard):
                if not checked and self._committed(asset, shard, manifest):
                    return  # another writer committed this very output: ours is a copy
                for path, table in side.items():
                    write_parquet(path, table.replace_schema_metadata({KEY_META: stats.key}), self.staging())
                manifest[integrity.CHECKSUMS] = {
                    **own, **integrity.records(self.data, [], {self._side_rel(p): p for p in side})}
                (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
                old = None
                if final.exists():
                    old = Path(tempfile.mkdtemp(dir=self.staging(), prefix="old.")) / final.name
                    final.rename(old)
                tmp.rename(final)
                leftover = None
                if old is not None:
                    shutil.rmtree(old.parent, ignore_errors=True)
                if self.remote is not None:
                    self.remote.push_version(self._rel(asset, shard), final, manifest, self.data)
                    self._fresh.add((asset, shard))
        finally:
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)


KEY_META = b"yunque_cache_key"


def write_parquet(path: Path, table: pa.Table, scratch: Path | None = None) -> None:
    """Write via a temporary file and one rename (same filesystem as `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=scratch or path.parent, prefix=".tmp.", suffix=".part")
    os.close(fd)
    try:
        import pyarrow.parquet as pq

        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write via a temporary file and one rename: a crash leaves the old file or the new one,
    and two writers at once (two `yunque run` writing the home's settings) each rename a
    temporary file of their own: the last rename wins, whole."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_jsonl(records: Sequence[dict], path: str | Path) -> Path:
    """One JSON record per line, written like `write_json` (a temporary file of this
    writer's own, then one rename). pipelines.tasks.post_data.read_sft reads SFT records."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=columns)


def drop_counts(reasons: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
