"""One configuration per home at a time.

Two `yunque run` on one home share its outputs and its remembered settings: with the same
configuration they take turns, but with different ones the second would overwrite what
the first is building, and both would report success. So each command holds a lease, a
file under `$DAGSTER_HOME/commands/` naming its configuration and locked (flock) for its
lifetime; a command whose configuration differs from a live lease's refuses before it
writes anything, and an unlocked lease is stale and removed. Per machine only:
docs/operations.md#one-configuration-per-home.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Lease:
    corpus: str
    preset: str
    config: str  # hash of the resolved configuration tree
    pid: int = 0
    command: str = "yunque run"

    def same_work(self, other: Lease) -> bool:
        return (self.corpus, self.preset, self.config) == (other.corpus, other.preset, other.config)


class HomeBusy(RuntimeError):
    """Another command runs on this home with another configuration; the message is the
    one line to print."""


def config_hash(tree: Any) -> str:
    """A short hash of the configuration tree (`stages.config.YunqueConfig`) a command runs."""
    from stages.store.keys import cache_key

    return cache_key(tree.to_dict())[:12]


def _root() -> Path:
    path = Path(os.environ["DAGSTER_HOME"]) / "commands"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _live(root: Path) -> list[tuple[Path, Lease]]:
    """The leases whose command still holds its lock; stale ones are removed."""
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # its command holds it: alive
                with contextlib.suppress(OSError, ValueError, TypeError):
                    out.append((path, Lease(**json.loads(path.read_text()))))
                continue
            path.unlink(missing_ok=True)  # nobody holds it: its command is gone
        finally:
            os.close(fd)
    return out


@contextlib.contextmanager
def held(lease: Lease) -> Iterator[None]:
    """Hold `lease` on this home until the block ends, or raise HomeBusy naming the live
    command with another configuration."""
    from orchestration.client import home_lock

    root = _root()
    path = root / f"{os.getpid()}.json"
    with home_lock("commands"):  # check and register in one step: two commands starting at once
        for _, other in _live(root):
            if other.pid != os.getpid() and not lease.same_work(other):
                raise HomeBusy(
                    f"`{other.command}` (pid {other.pid}) is running on this home with another configuration "
                    f"(preset {other.preset}, configuration {other.config}, corpus {other.corpus}; this command: "
                    f"preset {lease.preset}, configuration {lease.config}, corpus {lease.corpus}): wait for it to "
                    "end, or give this command another home (--home DIR)")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(asdict(Lease(**{**asdict(lease), "pid": os.getpid()}))).encode())
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
