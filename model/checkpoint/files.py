"""The checkpoint directory layout, without torch: listing checkpoints and verifying
their checksums. `stages` picks the checkpoint a stage consumes with `latest` (the
Dagster process need not import torch for that); `model.checkpoint.state` writes and loads them.

    <root>/step-00000500/  one directory per step (see model.checkpoint.state), checksums.json last
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("model.checkpoint.state")
PREFIX = "step-"
FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")
SUMS = "checksums.json"  # written last, after the files it vouches for
TOKENIZER_DIR = "tokenizer"
HEADS = "heads.safetensors"
# early stopping's record of the best step, beside the checkpoints (model.pretrain.early_stop)
BEST_FILE = "best.json"


@dataclass
class Checkpoint:
    path: Path
    step: int

    def state(self) -> dict:
        return json.loads((self.path / "state.json").read_text())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def all_checkpoints(root: Path) -> list[Checkpoint]:
    if not root.exists():
        return []
    found = [Checkpoint(p, int(p.name[len(PREFIX):])) for p in root.iterdir()
             if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit()]
    return sorted(found, key=lambda c: c.step)


def checksums(path: str | Path) -> dict[str, str]:
    """A checkpoint's recorded SHA-256 per file (its checksums.json, written last). Not
    verified here: whoever chose the checkpoint did (`latest`), and hashing large weights
    again is slow."""
    return json.loads((Path(path) / SUMS).read_text())


def weights_sha256(path: str | Path) -> str:
    """The recorded SHA-256 of a checkpoint's weights (model.safetensors)."""
    return checksums(path)["model.safetensors"]


def verify(ckpt: Checkpoint) -> str | None:
    """None if intact, else what is wrong."""
    sums = ckpt.path / SUMS
    if not sums.exists():
        return "no checksums.json (incomplete)"
    expected = json.loads(sums.read_text())
    for name in sorted(set(FILES) | set(expected)):
        path = ckpt.path / name
        if not path.exists():
            return f"{name} missing"
        if sha256_file(path) != expected.get(name):
            return f"{name} checksum mismatch"
    return None


def latest(path: str | Path) -> Checkpoint | None:
    """The newest intact checkpoint under `path` (an asset directory such as
    data/base_model), or `path` itself if it is one checkpoint."""
    path = Path(path)
    candidates = [Checkpoint(path, int(path.name[len(PREFIX):]))] if path.name.startswith(PREFIX) \
        else all_checkpoints(path)
    for ckpt in reversed(candidates):
        problem = verify(ckpt)
        if problem is None:
            return ckpt
        log.warning("checkpoint %s is unusable (%s); trying the previous one", ckpt.path, problem)
    return None
