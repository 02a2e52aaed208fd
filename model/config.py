"""Model shapes as a dataclass with presets as functions (torch-free, so data stages can
size the corpus against them).

Conventions: head dimension 64, SwiGLU hidden size about 8/3 of
the model width rounded up to a multiple of 128, no biases, tied embeddings for the
small shapes (they would be half the parameters otherwise).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class ModelConfig:
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    n_kv_heads: int | None = None  # grouped-query attention when < n_heads
    ffn_dim: int = 2048
    context: int = 1024
    vocab_size: int = 32_000  # replaced by the tokenizer's at training time
    tie_embeddings: bool = True
    qk_norm: bool = False
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5

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

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        return dataclasses.replace(self, vocab_size=vocab_size)


def tiny() -> ModelConfig:
    """About 1.4M parameters at a 4096 vocabulary: trains on 2 CPU cores in minutes."""
    return ModelConfig(dim=128, n_layers=4, n_heads=2, ffn_dim=384, context=256, vocab_size=4096)


def small() -> ModelConfig:
    """About 25M parameters at a 32k vocabulary."""
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
    rows = []
    for name, make in PRESETS.items():
        params = make().num_params(vocab_size)
        ratio = train_tokens / params
        verdict = "too few tokens" if ratio < 20 else ("in range" if ratio <= 100 else "more than enough")
        rows.append({"preset": name, "parameters": params, "tokens_per_parameter": round(ratio, 3),
                     "verdict": verdict})
    return rows
