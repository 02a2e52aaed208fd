"""Scalar heads on the language model's trunk: the reward model's score and PPO's value.

The head weights live in the checkpoint's heads.safetensors (model.checkpoint.state), so the
model.safetensors of every stage stays a plain language model that evaluation, `yunque
chat` and the export read unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from model.core.gpt import GPT


def _head(dim: int) -> nn.Linear:
    head = nn.Linear(dim, 1)
    nn.init.normal_(head.weight, std=1 / (dim + 1) ** 0.5)
    nn.init.zeros_(head.bias)
    return head


class RewardModel(nn.Module):
    """r(prompt, reply): a linear score of the trunk's state at the reply's last token
    (its <|end|>), trained with the Bradley-Terry loss."""

    def __init__(self, gpt: GPT):
        super().__init__()
        self.gpt = gpt
        self.score = _head(gpt.cfg.dim)

    def forward(self, idx: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """idx (B, T) right-padded, last (B,) index of each row's final token -> (B,)."""
        h = self.gpt.trunk(idx)
        return self.score(h[torch.arange(idx.shape[0], device=idx.device), last]).squeeze(-1).float()

    def heads(self) -> dict[str, torch.Tensor]:
        return {f"score.{k}": v for k, v in self.score.state_dict().items()}

    def load_heads(self, weights: dict[str, torch.Tensor]) -> None:
        self.score.load_state_dict({k.removeprefix("score."): v for k, v in weights.items() if k.startswith("score.")})


class PolicyValue(nn.Module):
    """The policy's logits and a value per position from one trunk pass (PPO). Sharing
    the trunk halves the forward cost on a CPU, but the value loss must not reach the
    trunk: measured on the tiny model, a value head training the shared trunk took
    held-out accuracy from 59% to 14-42% within 25-30 PPO steps. So the value head
    reads the trunk's states detached, a linear probe of the policy's own features."""

    def __init__(self, gpt: GPT):
        super().__init__()
        self.gpt = gpt
        # zero at the start: a random head's values differ from token to token by about
        # one unit, and GAE turns those differences into advantages of pure noise before
        # the head has learned anything (measured: the policy degraded within 25 steps)
        self.value = _head(gpt.cfg.dim)
        nn.init.zeros_(self.value.weight)

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.gpt.trunk(idx)
        return self.gpt.lm_head(h), self.value(h.detach()).squeeze(-1).float()

    def heads(self) -> dict[str, torch.Tensor]:
        return {f"value.{k}": v for k, v in self.value.state_dict().items()}

    def load_heads(self, weights: dict[str, torch.Tensor]) -> None:
        if any(k.startswith("value.") for k in weights):
            self.value.load_state_dict({k.removeprefix("value."): v for k, v in weights.items()
                                        if k.startswith("value.")})
