"""Checkpoints: one directory per step, written atomically, verified by checksum.

`<root>/step-NNNNNNNN/` holds the weights (a tied head stored once), the optimizer and RNG
states, any post-training heads, state.json (step, loader state, configs, metrics), the
tokenizer it was trained with (so the directory is usable on its own) and checksums.json.
Nothing is unpickled beyond tensors and plain containers. `latest(root)` is the newest
checkpoint whose checksums hold; a corrupted newest one is skipped with a warning. The
files: docs/pretraining.md#files.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

# The layout without torch (listing, verification), re-exported: callers use model.checkpoint.state.
from model.checkpoint.files import (  # noqa: F401
    FILES,
    HEADS,
    PREFIX,
    SUMS,
    TOKENIZER_DIR,
    Checkpoint,
    all_checkpoints,
    latest,
    sha256_file,
    verify,
)


class CheckpointError(RuntimeError):
    pass


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(root: Path, step: int, weights: dict[str, torch.Tensor], optimizer_state: dict, state: dict,
         keep: int = 3, tied: bool = False, tokenizer: str | Path | None = None,
         heads: dict[str, torch.Tensor] | None = None, protect: Iterable[int] = ()) -> Checkpoint:
    """Write step `step` under `root` (temporary directory, fsync, one rename), then keep
    only the newest `keep` checkpoints and those of the steps in `protect` (the run's best,
    model.pretrain.early_stop). `weights` and `optimizer_state` are full (unsharded) state dicts
    (model.core.parallel.full_state)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:08d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    weights = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
    if tied:
        weights.pop("lm_head.weight", None)  # the same tensor as the embedding
    save_file(weights, tmp / "model.safetensors")
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "step": step}, indent=1))
    names = list(FILES)
    if heads:  # apart from model.safetensors, which stays exactly the language model's
        save_file({k: v.detach().contiguous().cpu() for k, v in heads.items()}, tmp / HEADS)
        names.append(HEADS)
    if tokenizer:
        shutil.copytree(tokenizer, tmp / TOKENIZER_DIR, ignore=shutil.ignore_patterns("*.tmp", "_*"))
        names += sorted(str(p.relative_to(tmp)) for p in (tmp / TOKENIZER_DIR).rglob("*") if p.is_file())
    for name in names:
        _fsync(tmp / name)
    (tmp / SUMS).write_text(json.dumps({n: sha256_file(tmp / n) for n in names}, indent=1))
    _fsync(tmp / SUMS)
    if final.exists():  # a re-run of the same step (resumed from an older one)
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync(root)
    protect = set(protect)
    for old in all_checkpoints(root)[:-keep]:
        if old.step not in protect:
            shutil.rmtree(old.path, ignore_errors=True)
    return Checkpoint(final, step)


def load_weights(ckpt: Checkpoint, model: torch.nn.Module) -> None:
    weights = load_file(ckpt.path / "model.safetensors")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = getattr(getattr(model, "cfg", None), "tie_embeddings", False)
    if unexpected or [k for k in missing if not (tied and k == "lm_head.weight")]:
        raise CheckpointError(f"{ckpt.path}: weights do not fit the model (missing {missing}, unexpected {unexpected})")


def load_heads(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    path = ckpt.path / HEADS
    return load_file(path) if path.exists() else {}


def load_training_state(ckpt: Checkpoint) -> tuple[dict, dict]:
    """(optimizer state, state.json), restoring the RNG as it was at the save."""
    torch.set_rng_state(torch.load(ckpt.path / "rng.pt", weights_only=True)["torch"])
    return torch.load(ckpt.path / "optimizer.pt", weights_only=True), ckpt.state()
