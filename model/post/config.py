"""Post-training recipes (torch-free): one dataclass per stage of the chain
sft_model -> reward_model -> dpo_model -> ppo_model -> grpo_model, with presets.

Each stage starts from the previous stage's latest checkpoint (the reward model from
the SFT model's trunk; PPO from DPO, scored by the reward model; GRPO from PPO).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import Field

from model.core.schedule import schedule_problem
from pipelines.sections import (
    RUNTIME,
    Fraction,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    role,
    section,
)


@section
class StageConfig:
    steps: NonNegInt = 100  # optimizer steps (RL: rollout batches, each `iterations` updates)
    # conversations (SFT), pairs (reward model, DPO), prompts (PPO, GRPO) per step and per rank:
    # with several ranks the global batch is batch_size x ranks
    batch_size: PosInt = 16
    lr: NonNegFloat = 1e-4
    min_lr: NonNegFloat = 1e-5
    warmup: NonNegInt = 10
    weight_decay: NonNegFloat = 0.0
    betas: tuple[Fraction, Fraction] = (0.9, 0.95)  # AdamW's; a slower second moment (0.99+) steadies noisy RL gradients
    grad_clip: NonNegFloat = 1.0
    dtype: Literal["fp32", "bf16", "auto"] = "fp32"  # bf16: autocast; auto: bf16 where native (model.core.precision)
    seed: int = 0
    # RUNTIME: when and how fast, not what the stage computes. Evaluation is greedy and changes
    # no state, so when it runs is not part of the recipe; a data file is keyed by its content
    # (stages.training.post_train), not its path.
    eval_every: PosInt = role(RUNTIME, 50)
    checkpoint_every: PosInt = role(RUNTIME, 100)
    keep_checkpoints: PosInt = role(RUNTIME, 2)
    threads: NonNegInt = role(RUNTIME, 0)  # torch intra-op threads on CPU (0: torch's default)
    data: str = role(RUNTIME, "")  # a jsonl file in the conventional format (pipelines.tasks.post_data); "": built-in math set
    math_level: str = "add2"  # built-in set: pipelines.tasks.math_tasks level, training operands only
    examples: PosInt = 2000  # built-in set size
    heldout_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05  # of the examples, kept out of training for the stage's own evaluation
    # replay of pretraining text (model/post/replay.py): each update's loss gains replay x the
    # next-token loss on replay_batch_size windows (per rank) of the base model's token shards,
    # train split, so the stage keeps the corpus's perplexity (docs/post-training.md); 0: off
    replay: NonNegFloat = 0.1
    replay_batch_size: PosInt = 4
    # human feedback (the human_preferences asset: pairs for the reward model and DPO, the
    # endorsed answers for SFT) mixed with the synthetic data: each human training example
    # counts this many times (a fraction: a seeded sample); 0 leaves it out
    human_weight: NonNegFloat = 1.0


@section
class SFTConfig(StageConfig):
    """Loss on assistant tokens only; a lower learning rate than pretraining.

    The SFT data is a mixture (docs/post-training.md): the built-in math set (`examples`
    problems), a user's `data` file, question-answer pairs made from the corpus' own
    sections (train documents only: stages/data/domain_qa.py) and general conversational turns."""

    examples: NonNegInt = 2000  # math problems in the mixture; 0: none
    domain_qa: NonNegInt = 1000  # at most this many of the corpus' question-answer pairs; 0: none
    chitchat: NonNegInt = 100  # conversational turns (the fixed set, cycled through); 0: none


@section
class RewardConfig(StageConfig):
    heldout_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.1  # held-out pairs for the accuracy in the metadata
    replay: NonNegFloat = 0.0  # a scoring head on the trunk, not the language model: nothing to keep


@section
class DPOConfig(StageConfig):
    loss: Literal["dpo", "orpo", "kto"] = "dpo"  # orpo: no reference model; kto: unpaired
    beta: PosFloat = 0.1  # DPO / KTO: strength of the pull towards the reference
    orpo_lambda: NonNegFloat = 0.1  # ORPO: weight of the odds-ratio term against the NLL
    # DPO: + rpo_alpha x the chosen reply's per-token NLL (RPO, Pang et al. 2024). Plain DPO
    # lowers the chosen reply's likelihood along with the rejected one's; the NLL term holds it.
    rpo_alpha: NonNegFloat = 0.0
    # Off: measured on the sample (docs/post-training.md), the preference and RL stages keep
    # the perplexity SFT leaves them (76.0 -> 76.1 after GRPO), replay or not; SFT forgets.
    replay: NonNegFloat = 0.0


@section
class RLConfig(StageConfig):
    max_new_tokens: PosInt = 80  # per reply
    temperature: PosFloat = 1.0  # rollouts sample from the policy as it is
    top_k: NonNegInt = 0
    clip: NonNegFloat = 0.2  # PPO-style ratio clip
    iterations: PosInt = 2  # policy updates per rollout batch (1: on-policy, the clip never binds)
    replay: NonNegFloat = 0.0  # off, as for DPO: RL moves perplexity by 0.1% (docs/post-training.md)
    kl_coef: NonNegFloat = 0.04  # KL penalty to the reference (the stage's starting model)
    correct_reward: float = 1.0  # verifiable: the <answer> (or last number) equals the answer
    format_reward: float = 0.1  # verifiable: <think>...</think><answer>N</answer> with one number
    dev_problems: NonNegInt = role(RUNTIME, 64)  # greedy accuracy on training-operand problems at each evaluation


@section
class PPOConfig(RLConfig):
    kl_coef: NonNegFloat = 0.05  # per-token KL penalty folded into the reward (InstructGPT)
    reward_model_weight: float = 1.0  # the reward model's score in the reward
    # standardise the reward model's scores within each batch: its scale is arbitrary (the
    # Bradley-Terry loss fixes only differences), the verifiable reward's is 0/1
    whiten_scores: bool = True
    verifiable_weight: float = 1.0  # 0: the reward model alone
    vf_coef: NonNegFloat = 0.1
    value_clip: NonNegFloat = 0.2
    gamma: Fraction = 1.0
    lam: Fraction = 0.95
    minibatches: PosInt = 1  # per update


@section
class GRPOConfig(RLConfig):
    group: Annotated[int, Field(ge=2)] = 8  # samples per prompt; advantages are normalised within each group
    # a group whose samples all scored alike has advantage 0: leave it out of the update
    # (DAPO's dynamic sampling, without resampling); False trains on every sample, as TRL does
    skip_uniform_groups: bool = True


@section
class PostTrainConfig:
    sft: SFTConfig = field(default_factory=SFTConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)


STAGE_TYPES = {"sft": SFTConfig, "reward": RewardConfig, "dpo": DPOConfig, "ppo": PPOConfig, "grpo": GRPOConfig}


@dataclasses.dataclass(frozen=True)
class PostRun:
    """One post-training run as the stage layer resolved it: the stage's recipe and where
    everything is. stages.training.post_train writes it as the stage's train_config.json
    (`to_json`); the program (model.post.train) reads it once (`from_json`) and hands this
    object on."""

    stage: str  # sft | reward | dpo | ppo | grpo
    train: StageConfig  # the stage's recipe, STAGE_TYPES[stage]
    init: str  # the checkpoint (or asset directory) to start from
    out: str  # this stage's directory
    data: str = ""  # the user's jsonl, "": the built-in set
    reward_model: str = ""  # PPO: the reward model's checkpoint directory
    mixture: dict[str, str] = dataclasses.field(default_factory=dict)  # SFT: {source: jsonl path}
    human: str = ""  # the human_preferences asset's pairs (reward, DPO) or conversations (SFT) jsonl
    replay_shards: list[str] = dataclasses.field(default_factory=list)  # the base model's token shards
    lineage: dict[str, Any] = dataclasses.field(default_factory=dict)
    # the corpus' language (YunqueConfig.language): the built-in math sets' wordings and instruction
    language: str = "es"

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "train": dataclasses.asdict(self.train)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PostRun:
        stage = raw.get("stage")
        if stage not in STAGE_TYPES:
            raise ValueError(f"train_config.json: stage {stage!r} is not one of {sorted(STAGE_TYPES)}")
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"train_config.json: unknown keys {unknown}")
        return cls(**{**raw, "train": STAGE_TYPES[stage](**raw.get("train", {}))})


def check(name: str, c: StageConfig) -> None:
    """Rules between fields of one stage (each field validates its own type and range)."""
    if problem := schedule_problem(f"post.{name}", lr=c.lr, min_lr=c.min_lr, warmup=c.warmup, steps=c.steps):
        raise ValueError(problem)
    if isinstance(c, PPOConfig) and not 1 <= c.minibatches <= c.batch_size:
        raise ValueError(f"post.{name}.minibatches must be between 1 and batch_size ({c.batch_size})")
    if isinstance(c, RewardConfig) and c.replay:
        raise ValueError(f"post.{name}.replay: the reward model trains a scoring head, not the language model; "
                         "replay applies to sft, dpo, ppo and grpo")


def tiny() -> PostTrainConfig:
    """The whole chain on 2 CPU cores in about a quarter of an hour with the tiny model, SFT's
    900 steps the most of it (docs/recipes.md: the measured table, and
    why each setting is what it is; docs/post-training.md: what replay keeps and costs)."""
    rl = {"temperature": 0.7, "betas": (0.9, 0.99), "eval_every": 10}
    return PostTrainConfig(
        # No corpus pairs at this size: measured on the sample (docs/post-training.md), 1.4M
        # parameters hold the math task or the domain answers, not both (math in held-out
        # wordings 0.58 without pairs, 0.46 with 100, 0.05 with 1,000). More capacity: raise it.
        # 900 SFT steps (7.5 epochs of the 1,900 problems): at 300, three fresh base models
        # reached 2-7% held-out math; at 900 they reached 68%, 100% and 100% (43%, 96% and 90%
        # in held-out wordings) with perplexity 1.07-1.16x the base (docs/post-training.md).
        sft=SFTConfig(steps=900, batch_size=16, lr=1e-3, min_lr=1e-4, warmup=20, dtype="auto", eval_every=100,
                      examples=2000, domain_qa=0),
        reward=RewardConfig(steps=120, batch_size=16, lr=5e-4, min_lr=5e-5, warmup=10, dtype="auto",
                            eval_every=40, examples=1200),
        dpo=DPOConfig(steps=60, batch_size=8, lr=5e-5, min_lr=5e-6, warmup=5, eval_every=30, examples=1200,
                      beta=0.02, rpo_alpha=1.0),
        ppo=PPOConfig(steps=25, batch_size=16, lr=2e-5, min_lr=2e-6, warmup=3, kl_coef=0.1,
                      reward_model_weight=0.25, lam=1.0, **rl),
        grpo=GRPOConfig(steps=40, batch_size=16, lr=5e-5, min_lr=5e-6, warmup=5, **rl),
    )


def smoke() -> PostTrainConfig:
    """Every stage of the chain runs, a few steps each on a few dozen examples: the plumbing
    on the user's own corpus in minutes, not a model (stages.config.smoke)."""
    few = {"steps": 4, "batch_size": 4, "warmup": 1, "eval_every": 2, "checkpoint_every": 2, "examples": 48,
           "heldout_fraction": 0.25}
    rl = few | {"dev_problems": 4, "max_new_tokens": 16}
    return PostTrainConfig(sft=SFTConfig(**few, domain_qa=16, chitchat=16), reward=RewardConfig(**few),
                           dpo=DPOConfig(**few), ppo=PPOConfig(**rl), grpo=GRPOConfig(**rl, group=2))

