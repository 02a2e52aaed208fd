"""Replay of pretraining text in post-training: every optimizer step of a stage that
trains the language model (SFT, DPO/ORPO/KTO, PPO, GRPO; not the reward model's head)
adds `replay` x the next-token loss on a batch of pretraining windows to its loss, so the
chain keeps the base model's language (validation perplexity on the corpus) while it
learns the task.

The windows come from the token shards the base model trained on (the checkpoint's
`train_config`, carried down the chain by model/post/train.py; run.json's `replay_shards`
when the stage layer resolved them in the home), from their TRAIN split
only (the validation split is what evaluation measures), through the pretraining loader
(model.pretrain.data.TokenWindows): split across ranks without overlap, and resumable exactly
from the few integers of its state, which the stage's checkpoints store.
"""

from __future__ import annotations

from pathlib import Path

import torch

from model.core.precision import autocast
from model.post.config import PostRun
from model.pretrain.data import TokenWindows

# each stage reads its own order of the windows (all seeded by the stage's seed)
_STREAM = {"sft": 1, "reward": 2, "dpo": 3, "ppo": 4, "grpo": 5}


class ReplayError(FileNotFoundError):
    """The base model's token shards are not here (model.post.train: `cannot start`)."""


class Replay:
    """The replayed LM loss of one stage: `loss(model)` draws the next batch of windows."""

    split = "train"

    def __init__(self, cfg, loaded, d, run: PostRun):
        stage = run.stage
        train = loaded.state.get("train_config") or {}
        # as the stage layer resolved them in the home (stages.training.post_train.replay_shards), else as recorded
        shards = [str(s) for s in (run.replay_shards or train.get("shards", []))]
        missing = [s for s in shards if not Path(s, "header.json").exists()]
        if not shards or missing:
            what = f"missing: {missing[:3]}" if missing else "the starting checkpoint names none"
            raise ReplayError(f"post.{stage}.replay={cfg.replay} replays the base model's token shards ({what}); "
                              f"materialize token_shards again, or set post.{stage}.replay=0")
        self.weight, self.dtype, self.device, self.world = cfg.replay, cfg.dtype, d.device, d.world
        seq_len = min(int(train.get("seq_len") or loaded.config.context), loaded.config.context)
        self.loader = TokenWindows(shards, seq_len, cfg.replay_batch_size, split=self.split, rank=d.rank,
                                   world_size=d.world, seed=cfg.seed * 100 + _STREAM.get(stage, 0))
        self.tokens = 0  # global: every rank's windows
        self._losses: list[float] = []

    @property
    def tokens_per_update(self) -> int:
        return self.loader.global_batch * self.loader.seq_len

    def loss(self, model: torch.nn.Module) -> torch.Tensor:
        """The weighted next-token loss of `model` (the GPT itself, not a DDP wrapper: the
        caller adds it to the loss that went through DDP's forward, so one backward
        reduces both) on the next batch of windows."""
        x, y = self.loader.next_batch()
        with autocast(self.dtype, self.device):
            _, lm = model(x.to(self.device), y.to(self.device))
        self.tokens += self.tokens_per_update
        self._losses.append(lm.item())
        return self.weight * lm

    def metrics(self) -> dict:
        """replay_loss (the unweighted LM loss, mean over this step's updates) and the
        replayed tokens so far; clears the step's losses."""
        losses, self._losses = self._losses, []
        return {"replay_loss": sum(losses) / len(losses), "replay_tokens": self.tokens} if losses else {}

    def plan(self, cfg) -> dict:
        updates = cfg.steps * getattr(cfg, "iterations", 1) * getattr(cfg, "minibatches", 1)
        return {"replay": self.weight, "replay_windows_per_update": self.loader.global_batch,
                "replay_seq_len": self.loader.seq_len, "replay_tokens_planned": updates * self.tokens_per_update,
                "replay_shards": [s.path.name for s in self.loader.shards], "replay_split": self.split}

    def summary(self, cfg) -> str:
        p = self.plan(cfg)
        return (f"  replay: {self.weight} x LM loss on {p['replay_windows_per_update']} windows of "
                f"{p['replay_seq_len']} pretraining tokens per update, {p['replay_tokens_planned']} tokens in all "
                f"({len(p['replay_shards'])} shards, {self.split} split)")

    def state_dict(self) -> dict:
        return {"loader": self.loader.state_dict(), "tokens": self.tokens}

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.loader.load_state_dict(state["loader"])
            self.tokens = int(state["tokens"])


def off_summary(stage) -> str:
    if not stage.trains_lm:
        return "  replay: none (this stage trains a head on the trunk, not the language model)"
    return "  replay: off (replay = 0)"
