"""The decoder-only transformer, in one file, with the semantics of Hugging Face's
`LlamaForCausalLM` (RMSNorm, rotary positions on halves, SwiGLU, no biases) and its
parameter names, so that export is a copy of the state dict.

Shapes in comments: B batch, T time, D model width, H query heads, K key/value heads,
E head dimension, V vocabulary. No parallelism in here: DDP/FSDP and compile are applied
from the outside (model/core/parallel.py), torchtitan-style. Activation checkpointing is the one
exception, a flag on the model (`activation_checkpointing`, set by the training program):
it wraps each block's forward in `torch.utils.checkpoint` inside `forward` below.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from model.core.config import ModelConfig


class RMSNorm(nn.Module):
    """LlamaRMSNorm: normalise in fp32, scale in the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(cfg: ModelConfig, seq_len: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (T, E): the frequencies repeated for both halves, as HF does."""
    e = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, e, 2, dtype=torch.int64, device=device).float() / e))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, heads, T, E); cos/sin (T, E), or (B, 1, T, E) for per-row positions."""
    return (x * cos.to(x.dtype)) + (_rotate_half(x) * sin.to(x.dtype))


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        # Qwen3-style per-head norms of q and k (before rotary); stabilises larger runs
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: LayerCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)  # (B, T, H, E)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)  # (B, T, K, E)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, heads, T, E)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, K, S, E): every key so far, this step's included
        gqa = self.n_kv != self.n_heads
        if mask is None:  # training, the no-padding prefill, one new token: no mask to build
            # SDPA aligns is_causal top-left; one query is the newest position and sees every key
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))  # (B, T, D)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: LayerCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LayerCache:
    """One layer's keys and values, preallocated for the whole generation."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor):
        self.k, self.v = k, v  # (B, K, S_max, E)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[2]
        if end > self.k.shape[2]:
            raise ValueError(f"KV cache of {self.k.shape[2]} positions is full")
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class KVCache:
    """Keys and values of every layer for `batch` sequences of up to `max_len` tokens."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.layers = [LayerCache(torch.zeros(shape, device=device, dtype=dtype),
                                  torch.zeros(shape, device=device, dtype=dtype)) for _ in range(cfg.n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length


class Decoder(nn.Module):
    """`model.*` of LlamaForCausalLM."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # set by the trainer: recompute each layer in backward instead of keeping its activations
        self.activation_checkpointing = False
        cos, sin = rope_tables(cfg, cfg.context)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, 0.02) everywhere; the projections into the residual stream scaled by
        1/sqrt(2 * layers) (GPT-2), so the stream's variance does not grow with depth."""
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.n_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *,
                positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) -> logits (B, T, V) and, with targets (B, T; -100 ignored), the mean
        cross-entropy in fp32.

        For generation (model/core/generate.py): `positions` (B, T) are each token's rotary
        position (left-padded rows start later), `mask` (B, 1, T, S) says which of the S
        keys (cached + new) each query may see, and `cache` holds the earlier keys/values.
        Without them the forward is the plain causal one that training compiles."""
        logits = self.lm_head(self.trunk(idx, positions=positions, mask=mask, cache=cache))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss

    def trunk(self, idx: torch.Tensor, *, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
              cache: KVCache | None = None) -> torch.Tensor:
        """The final normed hidden states (B, T, D): what the lm_head reads, and what a
        reward or value head reads instead (model/post/heads.py)."""
        t = idx.shape[1]
        end = t + (cache.length if cache is not None else 0)
        if end > self.cfg.context:
            raise ValueError(f"sequence of {end} tokens exceeds the model context of {self.cfg.context}")
        if cache is not None and cache.length and mask is None and t > 1:
            # SDPA's is_causal aligns the mask top-left; new queries sit at the bottom right
            mask = torch.ones(t, end, dtype=torch.bool, device=idx.device).tril(diagonal=end - t)
        x = self.model.embed_tokens(idx)  # (B, T, D)
        if positions is None:
            start = cache.length if cache is not None else 0
            cos, sin = self.rope_cos[start:end], self.rope_sin[start:end]
        else:
            cos, sin = self.rope_cos[positions].unsqueeze(1), self.rope_sin[positions].unsqueeze(1)  # (B, 1, T, E)
        for i, layer in enumerate(self.model.layers):
            if cache is not None or mask is not None:
                x = layer(x, cos, sin, cache.layers[i] if cache is not None else None, mask)
            elif self.activation_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.model.norm(x)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once
