"""The launch spec: what node 0 started, so that every other node can join it.

When a training asset starts on several nodes, node 0 (the one running Dagster) writes
`data/<asset>/launch.json` into the home before it starts torchrun: the program (module),
its config as node 0 wrote it, the torchrun layout (nodes, processes per node, rendezvous
endpoint and id, restarts, timeouts) and node 0's local home. `yunque node` on another
node reads it from that node's copy of the home (a shared path, or a synced remote home),
replaces node 0's home prefix in every path of the config with its own (nodes may keep
the home at different places), and runs the same supervisor and torchrun with its rank.

`write_spec` / `read_spec` are the only two functions that touch the file.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SPEC_FILE = "launch.json"
NO_REWRITE = ("checkpoint_mirror",)  # the same place for every node by definition


@dataclass
class LaunchSpec:
    asset: str
    module: str  # python -m <module> --config <config file>
    config: dict[str, Any]  # the program's config as node 0 runs it (node 0's paths)
    config_name: str  # its file name; other nodes write theirs beside it
    root: str  # node 0's local home: the prefix other nodes replace with their own home
    launch: dict[str, Any]  # model.launch.supervise.Launch fields (node_rank is each node's own)
    run_key: str = ""
    env: dict[str, str] = field(default_factory=dict)  # the launcher's extra environment for every rank
    launch_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # one per launch: "newer" without clocks
    written_at: float = field(default_factory=time.time)  # node 0's clock, for people

    @property
    def nnodes(self) -> int:
        return int(self.launch.get("nnodes", 1))


def write_spec(run_dir: Path, spec: LaunchSpec) -> Path:
    """Write `<run_dir>/launch.json` (a temporary file and one rename)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / SPEC_FILE
    tmp = path.with_name(f".{SPEC_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(spec), indent=1, ensure_ascii=False))
    os.replace(tmp, path)
    return path


def read_spec(run_dir: Path) -> LaunchSpec | None:
    """The launch spec under `run_dir`, or None if there is none (or it is half written
    by a writer without the rename, e.g. a sync in progress)."""
    path = run_dir / SPEC_FILE
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    known = set(LaunchSpec.__dataclass_fields__)
    return LaunchSpec(**{k: v for k, v in raw.items() if k in known})


def rewrite_paths(value: Any, old_root: str, new_root: str, key: str = "") -> Any:
    """`value` with every string that is `old_root` or under it moved under `new_root`
    (dicts and lists walked; the checkpoint mirror left alone)."""
    old, new = old_root.rstrip("/"), new_root.rstrip("/")
    if isinstance(value, dict):
        return {k: rewrite_paths(v, old, new, k) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_paths(v, old, new, key) for v in value]
    if isinstance(value, str) and key not in NO_REWRITE and old != new:
        if value == old:
            return new
        if value.startswith(old + "/"):
            return new + value[len(old):]
    return value


def node_config(spec: LaunchSpec, home: Path, node_rank: int) -> Path:
    """Write this node's config (node 0's with this home's paths) beside the spec; its path."""
    run_dir = home / "data" / spec.asset
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"node-{node_rank}.{spec.config_name}"
    path.write_text(json.dumps(rewrite_paths(spec.config, spec.root, str(home)), indent=1, ensure_ascii=False))
    return path


def join_command(home: str | Path, node_rank: int, asset: str = "base_model") -> str:
    """What to run on node `node_rank` to join the launch described under `home`."""
    extra = "" if asset == "base_model" else f" --asset {asset}"
    return f"yunque node --home {home} --node-rank {node_rank}{extra} --now"
