"""Open a checkpoint for use: the model it describes with its weights, and its tokenizer,
with errors that say what is wrong with the path the user gave."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch

from model.checkpoint import state as ckpt
from model.core.chat import ChatTokenizer
from model.core.config import ModelConfig
from model.core.gpt import GPT


class LoadError(ValueError):
    pass


@dataclass
class Loaded:
    model: GPT
    tokenizer: ChatTokenizer
    checkpoint: ckpt.Checkpoint
    state: dict

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg


def resolve(path: str | Path) -> ckpt.Checkpoint:
    """A step directory, or a training asset's directory (its latest intact checkpoint)."""
    p = Path(path)
    if not p.exists():
        raise LoadError(f"no checkpoint at {p}: the path does not exist")
    found = ckpt.latest(p)
    if found is None:
        raise LoadError(f"no intact checkpoint at {p}: expected a {ckpt.PREFIX}NNNNNNNN directory with "
                        "checksums.json, or a directory that holds them (for example data/base_model)")
    return found


def _tokenizer_dir(found: ckpt.Checkpoint) -> Path:
    own = found.path / ckpt.TOKENIZER_DIR
    if own.exists():
        return own
    # checkpoints written before they carried their tokenizer: data/<asset>/step-N -> data/tokenizer
    sibling = found.path.parent.parent / "tokenizer"
    if (sibling / "tokenizer.json").exists():
        return sibling
    raise LoadError(f"{found.path}: no tokenizer in the checkpoint ({own}) nor beside it ({sibling})")


def model_config(found: ckpt.Checkpoint) -> ModelConfig:
    state = found.state()
    raw = state.get("model_config")
    if not isinstance(raw, dict):
        raise LoadError(f"{found.path}/state.json has no model_config: not a checkpoint written by yunque")
    known = {f.name for f in fields(ModelConfig)}
    if unknown := sorted(set(raw) - known):
        raise LoadError(f"{found.path}: model_config has fields this version does not know: {unknown}")
    return ModelConfig(**raw)


def load(path: str | Path | ckpt.Checkpoint, device: str | torch.device = "cpu",
         dtype: torch.dtype = torch.float32) -> Loaded:
    """`path` as a user gives it (resolved and verified here), or a Checkpoint that
    model.checkpoint.state.latest already verified (hashing a large checkpoint again is slow)."""
    found = path if isinstance(path, ckpt.Checkpoint) else resolve(path)
    cfg = model_config(found)
    tok = ChatTokenizer(_tokenizer_dir(found))
    if tok.vocab_size != cfg.vocab_size:
        raise LoadError(f"{found.path}: the tokenizer has {tok.vocab_size} tokens but the model {cfg.vocab_size}; "
                        "they are not from the same run")
    model = GPT(cfg)
    try:
        ckpt.load_weights(found, model)
    except ckpt.CheckpointError as e:
        raise LoadError(str(e)) from e
    model.to(device=device, dtype=dtype).eval()
    return Loaded(model, tok, found, found.state())
