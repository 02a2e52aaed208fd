"""The corpus as a set of shards on a local directory or an S3 prefix.

A shard is each subdirectory or single file directly under the corpus root; it becomes
one Dagster partition. Entries whose name starts with "." (e.g. `.complete` markers,
`.DS_Store`) or "_" (e.g. `_SUCCESS`, `_tmp`) at the root are not shards, and dotfiles
inside a shard are not read. A shard with no readable file does not exist (S3 has no
empty directories, so local disk follows the same rule).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from pipelines.s3_outage import patient

# Dagster partition keys must be plain names.
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_KEY_CHARS = 100

FileEntry = tuple[str, int, str]  # (path relative to the corpus root, size, version token)


@dataclass
class ShardInfo:
    key: str  # partition key (see `shard_key`)
    path: str  # the shard's path in `fs` (directory or file)
    files: list[FileEntry]  # relative to the corpus root, so each starts with `name`
    fingerprint: str = ""  # changes when any file is added, removed or modified
    name: str = ""  # the entry's name under the corpus root

    def __post_init__(self) -> None:
        if not self.name:
            self.name = self.path.rstrip("/").rsplit("/", 1)[-1]
        if not self.fingerprint:
            self.fingerprint = fingerprint(self.files)


def open_corpus(
    uri: str, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Filesystem and root path for a local directory, `file://...` or `s3://bucket/prefix`.

    For S3 the endpoint may be given either as s3fs expects it
    (`{"client_kwargs": {"endpoint_url": ...}}`) or flat (`{"endpoint_url": ...}`).
    """
    options = dict(storage_options or {})
    fs, root = url_to_fs(uri, **options)
    patient(fs)  # an S3 endpoint that restarts is waited for (pipelines.s3_outage)
    if isinstance(fs, LocalFileSystem):
        root = fs._strip_protocol(root)  # absolute, no trailing slash
    root = root.rstrip("/") or "/"
    # s3fs caches listings per instance (and instances per options); a sensor polling
    # for new shards must see the current state.
    fs.invalidate_cache(root)
    return fs, root


def shard_key(name: str) -> str:
    """A deterministic Dagster partition key for a shard name.

    Plain names are kept as they are, so keys read like the corpus. Anything else is
    sanitised and gets a short hash of the original name, so that two names that
    sanitise alike ("a b" and "a_b") still get different keys.
    """
    if _PLAIN_KEY.match(name) and len(name) <= _MAX_KEY_CHARS and name not in (".", ".."):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    stem = _UNSAFE_RUN.sub("_", name).strip("_")[:_MAX_KEY_CHARS] or "shard"
    return f"{stem}-{digest}"


def fingerprint(files: list[FileEntry]) -> str:
    blob = json.dumps(sorted(files), separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _version_token(info: dict) -> str:
    # S3 gives an ETag (content hash for simple uploads); local disk an mtime. Size is
    # recorded separately, so a token only has to catch same-size rewrites.
    for k in ("ETag", "etag", "mtime", "LastModified", "last_modified", "created"):
        value = info.get(k)
        if value is not None:
            return str(value).strip('"')
    return ""


def _hidden(rel_parts: list[str]) -> bool:
    return any(p.startswith(".") for p in rel_parts)


def _list_files(fs: fsspec.AbstractFileSystem, root: str, base: str,
                following: frozenset[str] = frozenset()) -> list[FileEntry]:
    """Every non-hidden file under `base` (a directory or a file), relative to `root`.

    On local disk a symbolic link is followed: to a file, it is that file; to a directory,
    its files are listed under the link's name. A link that cannot be followed (its target
    is missing, a loop of links, or a directory that holds the link or one it came
    through: `following` has the real paths of the linked directories listed above it) is listed as it is, so that reading it
    records a rejection (`readers.read_file`) instead of leaving it out unsaid."""
    found = fs.find(base, detail=True, withdirs=False)
    prefix = root.rstrip("/") + "/"
    out: list[FileEntry] = []
    if isinstance(fs, LocalFileSystem) and not following:
        following = frozenset({os.path.realpath(base)})
    for path, info in found.items():
        if path.endswith("/"):
            continue  # S3 "directory marker" objects
        path = fs._strip_protocol(path)
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if _hidden(rel.split("/")):
            continue
        if info.get("type") == "file":
            out.append((rel, int(info.get("size") or 0), _version_token(info)))
        elif info.get("islink") and isinstance(fs, LocalFileSystem):
            out += _linked(fs, root, path, rel, following)
    out.sort()
    return out


def _linked(fs: LocalFileSystem, root: str, path: str, rel: str, following: frozenset[str]) -> list[FileEntry]:
    """The files a local symbolic link stands for (see `_list_files`)."""
    try:
        st = os.stat(path)  # follows the link
    except OSError:
        return [(rel, 0, "broken-symlink")]
    if stat.S_ISREG(st.st_mode):
        return [(rel, st.st_size, str(st.st_mtime))]
    if not stat.S_ISDIR(st.st_mode):
        return []  # a device or a pipe: not a document
    target = os.path.realpath(path)
    holders = following | {os.path.realpath(os.path.dirname(path))}
    if any(d == target or d.startswith(target + os.sep) for d in holders):
        return [(rel, 0, "symlink-loop")]
    return _list_files(fs, root, path, following | {target})


def list_shards(fs: fsspec.AbstractFileSystem, root: str) -> list[ShardInfo]:
    """All shards under `root`, sorted by name, with their files and fingerprints.

    One recursive listing of the whole corpus (a single paginated LIST on S3) instead of
    one per shard.
    """
    fs.invalidate_cache(root)
    by_shard: dict[str, list[FileEntry]] = {}
    for entry in _list_files(fs, root, root):
        name = entry[0].split("/", 1)[0]
        if name.startswith("_"):
            continue
        by_shard.setdefault(name, []).append(entry)
    shards = [
        ShardInfo(key=shard_key(name), path=f"{root.rstrip('/')}/{name}", files=files, name=name)
        for name, files in sorted(by_shard.items())
    ]
    keys = [s.key for s in shards]
    if len(set(keys)) != len(keys):  # only possible with a hash collision; never silently
        raise ValueError(f"shard keys collide under {root}: {keys}")
    return shards


def list_shard_files(
    fs: fsspec.AbstractFileSystem, root: str, shard: ShardInfo | str
) -> list[FileEntry]:
    """Files of one shard (recursive, sorted, dotfiles skipped), relative to `root`."""
    name = shard.name if isinstance(shard, ShardInfo) else shard
    fs.invalidate_cache(root)
    return _list_files(fs, root, f"{root.rstrip('/')}/{name}")


def get_shard(fs: fsspec.AbstractFileSystem, root: str, name: str) -> ShardInfo:
    """The ShardInfo of one shard by its name under the root, listing only that shard."""
    files = list_shard_files(fs, root, name)
    return ShardInfo(key=shard_key(name), path=f"{root.rstrip('/')}/{name}", files=files, name=name)


__all__ = [
    "FileEntry",
    "ShardInfo",
    "fingerprint",
    "get_shard",
    "list_shard_files",
    "list_shards",
    "open_corpus",
    "shard_key",
]
