"""What every post-training stage shares: the stage interface the loop in
model/post/train.py drives, and the data each stage reads (a user's jsonl file, or the
built-in math sets)."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable

import torch

from model.checkpoint.load import Loaded
from model.core.batches import Epochs
from model.post.config import PostRun, StageConfig
from pipelines.tasks import packs, post_data
from pipelines.tasks.post_data import split_heldout

Update = Callable[[torch.Tensor], float]  # backward, clip, optimizer step; returns the gradient norm


class Stage:
    """One stage: `module` is what the optimizer trains (a GPT, or a GPT with a head);
    `forward_module` is the same wrapped in DDP when there are several ranks."""

    module: torch.nn.Module
    trains_lm = True  # False: a head's loss only (the reward model); no replay of pretraining text
    batches: Epochs | None = None  # the order of the stage's examples: its state resumes a run exactly

    def __init__(self, cfg: StageConfig, loaded: Loaded, d, run: PostRun, report):
        self.cfg, self.loaded, self.d, self.run, self.report = cfg, loaded, d, run, report
        self.tok = loaded.tokenizer
        self.device = d.device

    @property
    def forward_module(self) -> torch.nn.Module:
        return getattr(self, "_forward", None) or self.module

    @forward_module.setter
    def forward_module(self, m: torch.nn.Module) -> None:
        self._forward = m

    def step(self, step: int, update: Update) -> dict:
        raise NotImplementedError

    def evaluate(self) -> dict:
        return {}

    def plan(self) -> dict:
        return {}

    def summary(self) -> str:
        return "\n".join(f"  {k}: {v}" for k, v in self.plan().items())

    def heads(self) -> dict[str, torch.Tensor]:
        return {}

    def load_heads(self, weights: dict[str, torch.Tensor]) -> None:
        pass

    def state_dict(self) -> dict:
        return {"batches": self.batches.state_dict()} if self.batches is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if state and self.batches is not None:
            self.batches.load_state_dict(state["batches"])


def frozen_copy(module: torch.nn.Module) -> torch.nn.Module:
    """The reference model: the starting weights, never trained, in eval mode."""
    ref = copy.deepcopy(module).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def conversations(cfg: StageConfig, run: PostRun) -> tuple[list[list[dict]], str]:
    """The stage's conversations and where they come from: the user's data file, or else
    the built-in math set in the run's language (SFT with a `mixture` in its run: sft_mixture)."""
    if run.data:
        return post_data.read_sft(run.data), run.data
    if not packs.has(run.language, packs.MATH):  # the human conversations alone (the stage layer checked)
        return [], f"no built-in math set in {run.language}"
    return (post_data.math_sft(cfg.examples, cfg.math_level, cfg.seed, run.language),
            f"built-in math_sft/{cfg.math_level}")


def sft_mixture(cfg: StageConfig, run: PostRun) -> dict[str, list[list[dict]]]:
    """{source: conversations}: the user's file, the built-in math set (in the run's language;
    none when its pack has no math.toml), and the jsonl files of `run.mixture` ({source:
    path}: corpus pairs, conversational turns)."""
    sources: dict[str, list[list[dict]]] = {}
    if run.data:
        sources["data"] = post_data.read_sft(run.data)
    if cfg.examples and packs.has(run.language, packs.MATH):
        sources[f"math_{cfg.math_level}"] = post_data.math_sft(cfg.examples, cfg.math_level, cfg.seed, run.language)
    for name, path in run.mixture.items():
        sources[name] = post_data.read_sft(path)
    return sources


def preferences(cfg: StageConfig, run: PostRun) -> tuple[list[post_data.Preference], str]:
    if run.data:
        return post_data.read_preferences(run.data), run.data
    return (post_data.math_preferences(cfg.examples, cfg.math_level, cfg.seed, run.language),
            f"built-in math_preferences/{cfg.math_level}")


def weighted(items: list, weight: float, seed: int) -> list:
    """`items` counted `weight` times: whole copies, then a seeded sample for the fraction
    (2.5: every item twice and half of them a third time; 0.5: a half)."""
    whole = int(weight)
    extra = random.Random(seed).sample(items, round(len(items) * (weight - whole))) if items else []
    return items * whole + extra


def human_examples(run: PostRun, pairs: bool) -> list:
    """The human feedback the stage layer handed this run (run.human: the human_preferences
    asset's preference pairs for the reward model and DPO, its conversations for SFT)."""
    if not run.human:
        return []
    return post_data.read_preferences(run.human) if pairs else post_data.read_sft(run.human)


def human_part(cfg: StageConfig, items: list) -> tuple[list, list, dict]:
    """(train, held-out, plan) of the human examples: split as the synthetic ones are (no
    repeat of a held-out example in training), the train part weighted by cfg.human_weight."""
    if not items:
        return [], [], {}
    train, held = split_heldout(items, cfg.heldout_fraction, cfg.seed)
    train = weighted(train, cfg.human_weight, cfg.seed)
    return train, held, {"examples": len(items), "train": len(train), "heldout": len(held),
                         "weight": cfg.human_weight}
