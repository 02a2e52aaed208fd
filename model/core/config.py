"""Model shapes as a dataclass with presets as functions (torch-free, so data stages can
size the corpus against them).

Conventions: head dimension 64, SwiGLU hidden size about 8/3 of
the model width rounded up to a multiple of 128, no biases, tied embeddings for the
small shapes (they would be half the parameters otherwise).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from pydantic import Field, field_validator

from model.core.gguf_types import GGUF_TYPES, GgufType
from pipelines.sections import (
    CONTINUATION,
    PATH,
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
class ModelConfig:
    dim: PosInt = 768
    n_layers: PosInt = 12
    n_heads: PosInt = 12
    n_kv_heads: PosInt | None = None  # grouped-query attention when < n_heads
    ffn_dim: PosInt = 2048
    context: PosInt = 1024
    vocab_size: PosInt = 32_000  # replaced by the tokenizer's at training time
    tie_embeddings: bool = True
    qk_norm: bool = False
    rope_theta: PosFloat = 10_000.0
    norm_eps: PosFloat = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    def num_params(self, vocab_size: int | None = None) -> int:
        """Exact parameter count of the decoder this config describes."""
        v = vocab_size or self.vocab_size
        kv = self.kv_heads * self.head_dim
        attn = self.dim * self.dim * 2 + self.dim * kv * 2  # q, o and k, v projections
        if self.qk_norm:
            attn += 2 * self.head_dim
        mlp = 3 * self.dim * self.ffn_dim
        layer = attn + mlp + 2 * self.dim  # two RMSNorm weights
        embed = v * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * layer + embed + self.dim  # final norm


def tiny() -> ModelConfig:
    """About 1.4M parameters at a 4096 vocabulary: trains on 2 CPU cores in minutes."""
    return ModelConfig(dim=128, n_layers=4, n_heads=2, ffn_dim=384, context=256, vocab_size=4096)


def small() -> ModelConfig:
    """About 23M parameters at a 32k vocabulary."""
    return ModelConfig(dim=384, n_layers=6, n_heads=6, ffn_dim=1024, context=512)


def gpt2_125m() -> ModelConfig:
    """GPT-2 small's shape (768 wide, 12 layers, 12 heads, context 1024), vocabulary 32000."""
    return ModelConfig(dim=768, n_layers=12, n_heads=12, ffn_dim=2048, context=1024)


def m350() -> ModelConfig:
    return ModelConfig(dim=1024, n_layers=24, n_heads=16, ffn_dim=2816, context=2048)


def b1() -> ModelConfig:
    """TinyLlama's 1.1B shape: 2048 wide, 22 layers, 32 heads with 4 key/value heads."""
    return ModelConfig(dim=2048, n_layers=22, n_heads=32, n_kv_heads=4, ffn_dim=5632, context=2048,
                       tie_embeddings=False)


PRESETS = {"tiny": tiny, "small": small, "gpt2_125m": gpt2_125m, "350m": m350, "1b": b1}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]()


def corpus_verdict(train_tokens: int, vocab_size: int) -> list[dict]:
    """Tokens per parameter for every preset at this vocabulary, against the 20-100x
    rule of thumb (Chinchilla's ~20 is compute-optimal; small models keep improving to
    100x and beyond)."""
    return [{"preset": name} | tokens_verdict(train_tokens, make(), vocab_size) for name, make in PRESETS.items()]


def tokens_verdict(train_tokens: int, model: ModelConfig, vocab_size: int) -> dict:
    """One model's parameters and tokens per parameter, against the 20-100x rule."""
    params = model.num_params(vocab_size)
    ratio = train_tokens / params
    verdict = "too few tokens" if ratio < 20 else ("in range" if ratio <= 100 else "more than enough")
    return {"parameters": params, "tokens_per_parameter": round(ratio, 3), "verdict": verdict}


@section
class MixtureSource:
    """One named source of a pretraining data mixture (`train.mixture`, model/pretrain/mixture.py)."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[\w.-]+$")]  # also a metric name: tokens_per_source.<name>
    shards: Annotated[list[str], Field(min_length=1)]  # token shard names or fnmatch patterns ("web-*")
    weight: NonNegFloat  # share of the training windows, relative to the other sources' weights


@section
class TrainConfig:
    """One pretraining run. Each field says what it is to the run (pipelines.sections.role):
    PATH fields are where it reads and writes, filled in by the stage; RUNTIME fields are
    how, not what; CONTINUATION fields are where a continued run starts. The fields without
    a role are the recipe, hashed into the run's key."""

    shards: list[str] = role(PATH, factory=list)  # token_shards directories
    out: str = role(PATH, "checkpoints")
    tokenizer: str = role(PATH, "")  # tokenizer directory, copied into every checkpoint
    steps: PosInt = 1000
    batch_size: PosInt = 8  # sequences per rank per micro-step
    seq_len: PosInt = 256
    grad_accum: PosInt = 1
    # > 0: grad_accum is derived so that a step is at least this many tokens over all ranks
    tokens_per_step: NonNegInt = 0
    optimizer: Literal["adamw", "muon"] = "adamw"  # muon: Muon for hidden matrices, AdamW for the rest
    lr: PosFloat = 3e-3
    min_lr: NonNegFloat = 3e-4
    muon_lr: PosFloat = 0.02
    warmup: NonNegInt = 50
    schedule: Literal["cosine", "wsd"] = "cosine"  # wsd: warmup-stable-decay
    weight_decay: NonNegFloat = 0.1
    betas: tuple[Fraction, Fraction] = (0.9, 0.95)
    grad_clip: NonNegFloat = 1.0
    # "bf16": autocast (weights and optimizer stay fp32); "auto": bf16 where the device has
    # bf16 matrix units, else fp32 (model.core.precision: emulated bf16 is tens of times slower)
    dtype: Literal["fp32", "bf16", "auto"] = "fp32"
    compile: bool = False  # torch.compile the model (inductor; needs a C++ compiler on CPU)
    fsdp: bool = False  # FSDP2 (fully_shard) instead of DDP when WORLD_SIZE > 1
    eval_every: PosInt = 100
    eval_batches: PosInt = 20
    # Downstream evaluations during training (model.pretrain.downstream), every this many
    # steps on rank 0 (0: none): the domain QA score on the first downstream_qa_pairs pairs
    # of downstream_qa (the held-out pairs eval_report scores; the stage fills it in) and
    # downstream_samples seeded samples of downstream_tokens tokens with their repetition.
    downstream_every: NonNegInt = role(RUNTIME, 0)
    downstream_qa: str = role(PATH, "")
    downstream_qa_pairs: NonNegInt = role(RUNTIME, 16)
    downstream_samples: NonNegInt = role(RUNTIME, 2)
    downstream_tokens: PosInt = role(RUNTIME, 32)
    checkpoint_every: PosInt = role(RUNTIME, 500)
    keep_checkpoints: PosInt = role(RUNTIME, 3)  # the newest ones, plus the best (see early_stop_patience)
    # Early stopping (model.pretrain.early_stop): stop when validation loss has not fallen by more
    # than early_stop_min_delta nats for this many evaluations in a row (0: never). Every
    # improvement is checkpointed; the stages consume the best checkpoint, not the last.
    early_stop_patience: NonNegInt = role(RUNTIME, 0)
    early_stop_min_delta: NonNegFloat = role(RUNTIME, 0.001)
    seed: int = 0
    # A bad step (model.pretrain.divergence): a non-finite loss or gradient norm, or a loss
    # spike. stop: fail the run; skip: drop the step's update; warn: record it and train on
    # (a non-finite step is skipped); rollback: reload the last checkpoint from before the
    # spike, go on past the batches that caused it, the learning rate times
    # rollback_lr_factor, at most max_rollbacks times (then stop).
    on_nonfinite: Literal["stop", "skip", "warn", "rollback"] = "stop"
    # > 0: a loss above factor x the median of the last spike_window good losses, for
    # spike_patience steps in a row, is a spike
    spike_factor: NonNegFloat = 0.0
    spike_window: PosInt = role(RUNTIME, 50)
    spike_patience: PosInt = role(RUNTIME, 1)
    rollback_lr_factor: Annotated[float, Field(gt=0, le=1)] = role(RUNTIME, 1.0)
    max_rollbacks: NonNegInt = role(RUNTIME, 3)
    threads: NonNegInt = role(RUNTIME, 0)  # torch intra-op threads on CPU (0: leave torch's default)
    activation_checkpointing: bool = False
    preflight: bool = role(RUNTIME, True)  # refuse a run whose memory estimate exceeds the device
    warmup_probe_steps: NonNegInt = role(RUNTIME, 3)  # steps timed before training for the plan's time estimate (0: none)
    # Several nodes (model.checkpoint.mirror): an fsspec URL (s3://..., file://..., a shared
    # path) that rank 0 copies every checkpoint to and every node resumes from ("": none, and
    # then `out` must be on a path all nodes share).
    checkpoint_mirror: str = role(PATH, "")
    # Seconds a collective may wait for a peer before the process group gives up (0: torch's
    # default, 30 min for gloo): a dead node is then noticed in that time, not half an hour later.
    dist_timeout_s: NonNegInt = role(RUNTIME, 0)
    # Continued pretraining: when only the token shards changed since a complete run (same
    # tokenizer, model and recipe), the next run starts from its final weights and trains
    # `continue_steps` more on new/changed shards mixed with a replay of the old ones.
    continue_from_previous: bool = role(CONTINUATION, True)  # False: any change of shards trains from scratch
    continue_steps: NonNegInt = role(CONTINUATION, 0)  # 0: half of `steps` (so it follows a steps override)
    replay_fraction: Fraction = role(CONTINUATION, 0.25)  # share of windows from the shards the previous run saw
    # Data mixture (model/pretrain/mixture.py): named sources of shards and their shares of the training
    # windows; every shard in exactly one source. Empty: every shard alike (by tokens). Part of
    # the recipe: changing it trains afresh. A continued run keeps its new/replay split and
    # applies these weights within each part.
    mixture: list[MixtureSource] = dataclasses.field(default_factory=list)
    # Filled in by the stage for a continued run (stages/training/pretrain.py), like `shards`:
    init_from: str = role(CONTINUATION, "")  # checkpoint directory whose weights the run starts from
    start_step: NonNegInt = role(CONTINUATION, 0)  # that checkpoint's step; the run ends at `steps`
    replay_shards: list[str] = role(CONTINUATION, factory=list)  # the old group, a subset of `shards`
    mixture_shards: list[list[str]] = role(PATH, factory=list)  # each mixture source's shard dirs

    @field_validator("mixture")
    @classmethod
    def _mixture(cls, sources: list[MixtureSource]) -> list[MixtureSource]:
        names = [s.name for s in sources]
        if repeated := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"every mixture source needs its own name; repeated: {repeated}")
        if sources and sum(s.weight for s in sources) <= 0:
            raise ValueError("the weights of a mixture must sum above 0")
        return sources

    def continuation_steps(self) -> int:
        """Steps a continued run trains beyond the run it continues."""
        return self.continue_steps or max(1, self.steps // 2)

    def micro_steps(self, world_size: int) -> int:
        if self.tokens_per_step <= 0:
            return self.grad_accum
        per_micro = self.batch_size * self.seq_len * world_size
        return max(1, -(-self.tokens_per_step // per_micro))


@dataclasses.dataclass(frozen=True)
class PretrainRun:
    """One pretraining run as the stage layer resolved it (train_config.json): the model's
    shape at the tokenizer's vocabulary and the training section with its PATH and
    CONTINUATION fields filled in. stages.training.pretrain builds it (so a bad value fails
    there, before torchrun starts); the program reads it once (`from_json`)."""

    train: TrainConfig
    model: ModelConfig

    def to_json(self) -> dict:
        return {"train": dataclasses.asdict(self.train), "model": dataclasses.asdict(self.model)}

    @classmethod
    def from_json(cls, raw: dict) -> PretrainRun:
        if unknown := sorted(set(raw) - {"train", "model"}):
            raise ValueError(f"train_config.json: unknown keys {unknown}")
        return cls(TrainConfig(**raw.get("train", {})), ModelConfig(**raw.get("model", {})))


def train_tiny() -> TrainConfig:
    """Sized to the sample corpus on 2 CPU cores: a few minutes (docs/recipes.md)."""
    # 1600 steps of 2,048 tokens are ~8 epochs of the sample's 409k training tokens:
    # validation loss still falls at the end (3.83 nats against a unigram entropy of 6.8),
    # in about 3 minutes compiled (bf16 autocast, ~19k tokens/s; eager ~12k).
    # New shards continue for half as long again (continue_steps 0): 800 steps are ~1.6M
    # tokens, several epochs of a new shard of the sample's size, with a quarter replayed.
    # Early stopping after 4 evaluations (800 steps, half the run) without a fall of 0.001
    # nats: a healthy run's validation loss still falls at its last evaluation (above), so
    # this fires only on a corpus small enough to be memorised, and keeps its best step.
    return TrainConfig(steps=1600, batch_size=8, seq_len=256, lr=3e-3, min_lr=3e-4, warmup=50,
                       dtype="auto", compile=True, eval_every=200, eval_batches=14, checkpoint_every=400,
                       early_stop_patience=4, downstream_every=400)


def train_default() -> TrainConfig:
    # Early stopping after 8 evaluations (4,000 steps, a fifth of the run) without a fall of
    # 0.001 nats: long enough to ride out a plateau of a stable learning-rate phase, which a
    # healthy run leaves within a few hundred steps.
    return TrainConfig(steps=20_000, batch_size=16, seq_len=1024, tokens_per_step=524_288, lr=6e-4,
                       min_lr=6e-5, warmup=700, dtype="auto", compile=True, eval_every=500,
                       checkpoint_every=500, early_stop_patience=8, downstream_every=2000)


# Evaluation and export: how every checkpoint is measured and written out.
SAMPLE_PROMPTS = (
    "La instalación de Debian",
    "El sistema de archivos",
    "Para configurar la red,",
    "En la hoja de cálculo, pulse",
    "Había una vez",
)


@section
class EvalConfig:
    """eval_report: what every checkpoint is measured on (the same for every stage)."""
    val_batches: PosInt = 50  # batches of train.batch_size x train.seq_len validation tokens (at most)
    prompts: tuple[str, ...] = SAMPLE_PROMPTS  # generation samples, plain continuations
    sample_tokens: PosInt = 64
    temperature: NonNegFloat = 0.8
    top_k: NonNegInt = 50
    top_p: Annotated[float, Field(gt=0, le=1)] = 0.95
    seed: int = 0
    # held-out problems only (pipelines/tasks/math_tasks.py): a level ("add2", "mixed") is the
    # corpus' language's set ("es_add2" in Spanish); "fr_add2", "gsm_symbolic", "gsm8k" name one
    math_set: str = "add2"
    math_problems: NonNegInt = 200
    math_file: str = ""  # a GSM8K-format jsonl, evaluated as well when given
    math_max_new_tokens: PosInt = 96  # a column-by-column worked addition is about 70 tokens
    batch_size: PosInt = 32  # prompts decoded at once
    repetition_threshold: Fraction = 0.5  # repeated 4-gram rate of a sample that raises the alarm
    overfit_window: PosInt = 3  # evaluation points compared by the overfitting alarm
    # lm-evaluation-harness tasks run offline on every checkpoint's transformers export
    # (stages.evaluation.harness): the shipped yunque_<language>_qa (yunque_es_qa,
    # yunque_fr_qa: the corpus' language's) and the tasks of the
    # harness_include directories (the harness's YAML with local data files); () for none
    harness: tuple[str, ...] = ()
    harness_include: tuple[str, ...] = ()
    harness_limit: NonNegInt = 0  # items per task (0: all)


@section
class DeviceCost:
    """One device type of the cost estimate: its dense peak (TFLOP/s at the run's
    precision; 0 measures this machine's CPU), the model FLOPs utilisation assumed on it,
    and what an hour of one costs."""

    peak_tflops: NonNegFloat = 0.0
    mfu: Annotated[float, Field(gt=0, le=1)] = 0.4
    price_per_hour: NonNegFloat = 0.0


def _devices() -> dict[str, DeviceCost]:
    # datasheet bf16 dense peaks (SXM parts, as model.core.flops); prices are examples of
    # on-demand rates per GPU-hour: set your own
    return {"cpu": DeviceCost(0.0, 0.1, 0.0), "a100": DeviceCost(312.0, 0.4, 2.0),
            "h100": DeviceCost(989.0, 0.4, 3.0), "h200": DeviceCost(989.0, 0.4, 4.0)}


@section
class CostConfig:
    """The wall time and cost estimate before a training run (stages.training.cost): per
    device type, the run's FLOPs over peak x MFU, times the price."""

    devices: dict[str, DeviceCost] = dataclasses.field(default_factory=_devices)


@section
class ExportConfig:
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # of model.safetensors
    gguf: tuple[GgufType, ...] = GGUF_TYPES  # a model-<type>.gguf for each; () for none
