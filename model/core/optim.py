"""Optimizers: AdamW for everything, or Muon for the hidden weight matrices with AdamW
for the rest (embeddings, the output head, norms), as in modded-nanogpt and Moonlight.

Every param group keeps its peak learning rate in `peak_lr`; the schedule scales all of
them by the same factor, so Muon's and AdamW's rates keep their ratio.
"""

from __future__ import annotations

import torch

from model.core.config import TrainConfig


class Optimizers:
    """Several optimizers behind the one interface the training loop and checkpoints use."""

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers.values() for g in o.param_groups]

    def step(self) -> None:
        for o in self.optimizers.values():
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers.values():
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: o.state_dict() for name, o in self.optimizers.items()}

    def load_state_dict(self, state: dict) -> None:
        if set(state) != set(self.optimizers):
            raise ValueError(f"checkpoint has optimizer state for {sorted(state)}, this run uses "
                             f"{sorted(self.optimizers)} (train.optimizer changed?)")
        for name, o in self.optimizers.items():
            o.load_state_dict(state[name])

    def set_lr_factor(self, factor: float) -> None:
        for g in self.param_groups:
            g["lr"] = g["peak_lr"] * factor


def build(model: torch.nn.Module, cfg: TrainConfig, fused: bool) -> Optimizers:
    named = list(model.named_parameters())
    hidden = [p for n, p in named if p.dim() == 2 and n.startswith("model.layers.")]
    if cfg.optimizer == "muon":
        rest = [(n, p) for n, p in named if not any(p is h for h in hidden)]
        muon = torch.optim.Muon(hidden, lr=cfg.muon_lr, weight_decay=cfg.weight_decay,
                                adjust_lr_fn="match_rms_adamw")
        adamw = _adamw(rest, cfg, fused)
        opts = {"muon": muon, "adamw": adamw}
    elif cfg.optimizer == "adamw":
        opts = {"adamw": _adamw(named, cfg, fused)}
    else:
        raise ValueError(f"train.optimizer must be adamw or muon, got {cfg.optimizer!r}")
    for o in opts.values():
        for g in o.param_groups:
            g["peak_lr"] = g["lr"]
    return Optimizers(opts)


def _adamw(named: list[tuple[str, torch.nn.Parameter]], cfg: TrainConfig, fused: bool) -> torch.optim.AdamW:
    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=cfg.betas, fused=fused)
