"""Whether a committed output's files are still the ones its manifest committed.

`commit` records each file's size, mtime and xxHash3-128 (`record`). `damage` is the cheap
check, asked by every "is this up to date?": a missing file or another size is damage,
and a moved mtime means hashing that file. `verify` is the full one, asked when a stage
reads an input and by `yunque verify`: every byte, each file once per process while its
inode, size, mtime and ctime hold. A manifest without a record counts as damaged, so it
is rebuilt once rather than trusted unseen. docs/operations.md#damage-and-repair.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, BinaryIO

CHECKSUMS = "checksums"
ALGORITHM = "xxh3_128"
_CHUNK = 8 << 20


class DamagedOutput(RuntimeError):
    """A committed output whose files no longer match its manifest; the message is the
    one line a user sees: which output, which file, why, and what to run."""

    def __init__(self, message: str, file: str = "", why: str = ""):
        super().__init__(message)
        self.file, self.why = file, why


def checksum(path: Path) -> str:
    with open(path, "rb") as f:
        return stream_checksum(f)


def stream_checksum(f: BinaryIO) -> str:
    """The digest of what an open binary file (local, or an object store's) holds."""
    import xxhash

    h = xxhash.xxh3_128()
    while chunk := f.read(_CHUNK):
        h.update(chunk)
    return h.hexdigest()


# (path, inode, size, mtime_ns, ctime_ns) -> digest, for files hashed in this process
_seen: dict[tuple[str, int, int, int, int], str] = {}
_seen_lock = threading.Lock()


def _digest(path: Path, st: os.stat_result) -> str:
    memo = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _seen_lock:
        if memo in _seen:
            return _seen[memo]
    digest = checksum(path)
    with _seen_lock:
        _seen[memo] = digest
    return digest


def record(path: Path) -> dict[str, Any]:
    """What the manifest keeps of one file it commits."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, ALGORITHM: _digest(path, st)}


def expand(directory: Path, names: list[str]) -> dict[str, Path]:
    """Each file a manifest's `files` names, by its path under the output's directory: a
    name that is a directory (eval_contamination's purified/ split) stands for every file
    in it."""
    out: dict[str, Path] = {}
    for name in names:
        path = directory / name
        if path.is_dir():
            out.update({p.relative_to(directory).as_posix(): p for p in sorted(path.rglob("*")) if p.is_file()})
        else:
            out[name] = path
    return out


def records(directory: Path, files: list[str], side: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The checksums section of a manifest: the asset's files by their path under its
    directory, and its side files by their path under data/ (the same on every machine
    that caches the home)."""
    out = {name: record(path) for name, path in expand(directory, files).items()}
    out.update({rel: record(path) for rel, path in side.items()})
    return out


def restamp(checks: dict[str, dict[str, Any]], paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The same records with the local files' mtimes, after a download has verified them
    (the uploader's mtimes mean nothing on this machine)."""
    return {name: {**rec, "mtime_ns": paths[name].stat().st_mtime_ns} if name in paths else rec
            for name, rec in checks.items()}


def _problem(path: Path, rec: dict[str, Any], full: bool) -> str | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    if st.st_size != rec.get("size"):
        return f"size {st.st_size:,} bytes, committed {rec.get('size', 0):,}"
    if not full and st.st_mtime_ns == rec.get("mtime_ns"):
        return None
    if _digest(path, st) != rec.get(ALGORITHM):
        return "checksum"
    return None


def find_damage(paths: dict[str, Path], manifest: dict[str, Any], full: bool = False) -> tuple[str, str] | None:
    """(file, why) of the first file of a manifest that does not match its record, or None.
    `paths` maps each recorded name to where the file is on this machine."""
    checks = manifest.get(CHECKSUMS)
    if checks is None:
        return ("_manifest.json", "no checksums (written before they were recorded)")
    for name in sorted(set(paths) | set(checks)):
        rec, path = checks.get(name), paths.get(name)
        if rec is None:
            return (name, "not in the manifest's checksums")
        if path is None:
            return (name, "missing")
        if why := _problem(path, rec, full):
            return (name, why)
    return None
