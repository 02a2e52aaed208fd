"""Post-training recipes (torch-free): one dataclass per stage of the chain
sft_model -> reward_model -> dpo_model -> ppo_model -> grpo_model, with presets.

Each stage starts from the previous stage's latest checkpoint (the reward model from
the SFT model's trunk; PPO from DPO, scored by the reward model; GRPO from PPO).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StageConfig:
    steps: int = 100  # optimizer steps (RL: rollout batches, each `iterations` updates)
    # conversations (SFT), pairs (reward model, DPO), prompts (PPO, GRPO) per step and per rank:
    # with several ranks the global batch is batch_size x ranks
    batch_size: int = 16
    lr: float = 1e-4
    min_lr: float = 1e-5
    warmup: int = 10
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's; a slower second moment (0.99+) steadies noisy RL gradients
    grad_clip: float = 1.0
    dtype: str = "fp32"  # or "bf16" autocast
    seed: int = 0
    eval_every: int = 50
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    threads: int = 0  # torch intra-op threads on CPU (0: torch's default)
    data: str = ""  # a jsonl file in the conventional format (pipelines.post_data); "": built-in math set
    math_level: str = "add2"  # built-in set: pipelines.math_tasks level, training operands only
    examples: int = 2000  # built-in set size
    heldout_fraction: float = 0.05  # of the examples, kept out of training for the stage's own evaluation


@dataclass
class SFTConfig(StageConfig):
    """Loss on assistant tokens only; a lower learning rate than pretraining."""


@dataclass
class RewardConfig(StageConfig):
    heldout_fraction: float = 0.1  # held-out pairs for the accuracy in the metadata


@dataclass
class DPOConfig(StageConfig):
    loss: str = "dpo"  # "dpo", "orpo" (no reference model) or "kto" (unpaired)
    beta: float = 0.1  # DPO / KTO: strength of the pull towards the reference
    orpo_lambda: float = 0.1  # ORPO: weight of the odds-ratio term against the NLL
    # DPO: + rpo_alpha x the chosen reply's per-token NLL (RPO, Pang et al. 2024). Plain DPO
    # lowers the chosen reply's likelihood along with the rejected one's; the NLL term holds it.
    rpo_alpha: float = 0.0


@dataclass
class RLConfig(StageConfig):
    max_new_tokens: int = 80  # per reply
    temperature: float = 1.0  # rollouts sample from the policy as it is
    top_k: int = 0
    clip: float = 0.2  # PPO-style ratio clip
    iterations: int = 2  # policy updates per rollout batch (1: on-policy, the clip never binds)
    kl_coef: float = 0.04  # KL penalty to the reference (the stage's starting model)
    correct_reward: float = 1.0  # verifiable: the <answer> (or last number) equals the answer
    format_reward: float = 0.1  # verifiable: <think>...</think><answer>N</answer> with one number
    dev_problems: int = 64  # greedy accuracy on training-operand problems at each evaluation


@dataclass
class PPOConfig(RLConfig):
    kl_coef: float = 0.05  # per-token KL penalty folded into the reward (InstructGPT)
    reward_model_weight: float = 1.0  # the reward model's score in the reward
    # standardise the reward model's scores within each batch: its scale is arbitrary (the
    # Bradley-Terry loss fixes only differences), the verifiable reward's is 0/1
    whiten_scores: bool = True
    verifiable_weight: float = 1.0  # 0: the reward model alone
    vf_coef: float = 0.1
    value_clip: float = 0.2
    gamma: float = 1.0
    lam: float = 0.95
    minibatches: int = 1  # per update


@dataclass
class GRPOConfig(RLConfig):
    group: int = 8  # samples per prompt; advantages are normalised within each group
    # a group whose samples all scored alike has advantage 0: leave it out of the update
    # (DAPO's dynamic sampling, without resampling); False trains on every sample, as TRL does
    skip_uniform_groups: bool = True


@dataclass
class PostTrainConfig:
    sft: SFTConfig = field(default_factory=SFTConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)


# Fields that change where a stage reads and writes or how fast, not what it computes.
# Evaluation is greedy and changes no state, so when it runs is not part of the recipe; a data
# file is keyed by its content (pipelines.post_stage), not its path.
POST_RUNTIME_FIELDS = ("threads", "keep_checkpoints", "checkpoint_every", "eval_every", "dev_problems", "data")
STAGE_TYPES = {"sft": SFTConfig, "reward": RewardConfig, "dpo": DPOConfig, "ppo": PPOConfig, "grpo": GRPOConfig}
CHOICES = {"dtype": ("fp32", "bf16"), "loss": ("dpo", "orpo", "kto")}


def check(name: str, c: StageConfig) -> None:
    for f, allowed in CHOICES.items():
        if hasattr(c, f) and getattr(c, f) not in allowed:
            raise ValueError(f"post.{name}.{f} must be one of {allowed}, got {getattr(c, f)!r}")
    if min(c.batch_size, c.eval_every, c.checkpoint_every, c.examples) < 1 or c.steps < 0:
        raise ValueError(f"post.{name}: steps must be >= 0; batch_size, eval_every, checkpoint_every and "
                         "examples >= 1")
    if not 0 <= c.heldout_fraction < 1:
        raise ValueError(f"post.{name}.heldout_fraction must be in [0, 1), got {c.heldout_fraction}")
    if isinstance(c, GRPOConfig) and c.group < 2:
        raise ValueError(f"post.{name}.group must be at least 2 (advantages compare samples of one prompt)")
    if isinstance(c, RLConfig) and (c.iterations < 1 or c.temperature <= 0 or c.max_new_tokens < 1):
        raise ValueError(f"post.{name}: iterations and max_new_tokens must be at least 1 and temperature "
                             "above 0 (the policy samples its own rollouts)")
    if isinstance(c, PPOConfig) and not 1 <= c.minibatches <= c.batch_size:
        raise ValueError(f"post.{name}.minibatches must be between 1 and batch_size ({c.batch_size})")


def tiny() -> PostTrainConfig:
    """The whole chain on 2 CPU cores in about eight minutes with the tiny model (README:
    the measured table, and why each setting is what it is)."""
    rl = {"temperature": 0.7, "betas": (0.9, 0.99), "eval_every": 10}
    return PostTrainConfig(
        sft=SFTConfig(steps=300, batch_size=16, lr=1e-3, min_lr=1e-4, warmup=20, dtype="bf16", eval_every=100,
                      examples=2000),
        reward=RewardConfig(steps=120, batch_size=16, lr=5e-4, min_lr=5e-5, warmup=10, dtype="bf16",
                            eval_every=40, examples=1200),
        dpo=DPOConfig(steps=60, batch_size=8, lr=5e-5, min_lr=5e-6, warmup=5, eval_every=30, examples=1200,
                      beta=0.02, rpo_alpha=1.0),
        ppo=PPOConfig(steps=25, batch_size=16, lr=2e-5, min_lr=2e-6, warmup=3, kl_coef=0.1,
                      reward_model_weight=0.25, lam=1.0, **rl),
        grpo=GRPOConfig(steps=40, batch_size=16, lr=5e-5, min_lr=5e-6, warmup=5, **rl),
    )
