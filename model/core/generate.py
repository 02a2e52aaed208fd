"""Decoding: batched prompts, KV cache, temperature / top-k / top-p sampling, stop tokens.

Prompts of different lengths are left-padded into one (B, P) block. Each row's rotary
positions start at 0 on its first real token and the attention mask hides the padding,
so a row decodes exactly as it would alone. With `use_cache` the prompt is run once
(prefill) and each new token costs one position; without it every step re-runs the
whole sequence (the reference the cache is tested against).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from model.core.gpt import GPT, KVCache


@dataclass
class Sampling:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    stop: tuple[int, ...] = ()  # ids that end a row; not part of its output
    seed: int | None = None


def sample_next(logits: torch.Tensor, s: Sampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits (B, V) -> next ids (B,)."""
    if s.temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / s.temperature
    if s.top_k and s.top_k < logits.shape[-1]:
        kth = torch.topk(logits, s.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if s.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(dim=-1)
        # drop a token when the tokens before it already hold top_p of the mass; the first always stays
        drop = probs.cumsum(dim=-1) - probs > s.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class _Batch:
    idx: torch.Tensor  # (B, P) left-padded prompts
    pad: torch.Tensor  # (B,) padding before each row's first token
    lengths: torch.Tensor  # (B,) real tokens so far


def _left_pad(prompts: Sequence[Sequence[int]], keep: int, pad_id: int, device: torch.device) -> _Batch:
    if not prompts:
        raise ValueError("no prompts")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("an empty prompt: give at least one token (for example the end-of-text token)")
    rows = [list(p)[-keep:] for p in prompts]  # too long for the context: keep the most recent tokens
    width = max(len(r) for r in rows)
    idx = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        idx[i, width - len(r):] = torch.tensor(r)
    lengths = torch.tensor([len(r) for r in rows])
    return _Batch(idx.to(device), (width - lengths).to(device), lengths.to(device))


def _mask(pad: torch.Tensor, q_start: int, q_len: int, k_len: int) -> torch.Tensor | None:
    """(B, 1, q_len, k_len): causal, real keys only; a padding query sees itself (a row
    with nothing to attend to would give NaN). None when nothing is padded and the model's
    own causal rule applies (the whole prompt, or one new token)."""
    if (q_len == 1 or (q_start == 0 and q_len == k_len)) and not bool(pad.any()):
        return None
    q = torch.arange(q_start, q_start + q_len, device=pad.device)[:, None]
    k = torch.arange(k_len, device=pad.device)[None, :]
    real = k[None] >= pad[:, None, None]  # (B, 1, K)
    allowed = (k <= q)[None] & real | (k == q)[None]
    return allowed[:, None]


@torch.inference_mode()
def stream(model: GPT, prompts: Sequence[Sequence[int]], s: Sampling, use_cache: bool = True,
           pad_id: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (next ids (B,), finished (B,)) once per step; a finished row's id is
    meaningless. Ends when every row has stopped or max_new_tokens are out."""
    context = model.cfg.context
    if not 0 < s.max_new_tokens < context:
        raise ValueError(f"max_new_tokens must be between 1 and {context - 1} (the model context is {context})")
    emb = model.model.embed_tokens.weight  # the lm_head may be int8 (model/export/quantize.py)
    device = emb.device
    b = _left_pad(prompts, context - s.max_new_tokens, pad_id, device)
    gen = torch.Generator(device=device).manual_seed(s.seed) if s.seed is not None else None
    stop = torch.tensor(s.stop or [-1], device=device)
    n, width = len(prompts), b.idx.shape[1]
    done = torch.zeros(n, dtype=torch.bool, device=device)
    seq = b.idx
    cache = KVCache(model.cfg, n, width + s.max_new_tokens, device, emb.dtype) if use_cache else None
    positions = (torch.arange(width, device=device)[None] - b.pad[:, None]).clamp(min=0)
    logits, _ = model(seq, positions=positions, mask=_mask(b.pad, 0, width, width), cache=cache)
    for i in range(s.max_new_tokens):
        nxt = sample_next(logits[:, -1], s, gen)
        done = done | torch.isin(nxt, stop)
        yield nxt, done
        if bool(done.all()) or i == s.max_new_tokens - 1:
            return
        total = width + i + 1
        if cache is not None:
            pos = (b.lengths + i)[:, None]  # the new token's position in its own row
            logits, _ = model(nxt[:, None], positions=pos, mask=_mask(b.pad, total - 1, 1, total), cache=cache)
        else:  # the reference path: the whole sequence again
            seq = torch.cat([seq, nxt[:, None]], dim=1)
            positions = (torch.arange(total, device=device)[None] - b.pad[:, None]).clamp(min=0)
            logits, _ = model(seq, positions=positions, mask=_mask(b.pad, 0, total, total))


def generate(model: GPT, prompts: Sequence[Sequence[int]], s: Sampling, use_cache: bool = True, pad_id: int = 0,
             on_token: Callable[[int, int], None] | None = None) -> list[list[int]]:
    """The new tokens of every prompt, up to (not including) its stop token.
    `on_token(row, id)` is called as each token is produced (for streaming)."""
    out: list[list[int]] = [[] for _ in prompts]
    finished = [False] * len(prompts)
    for nxt, done in stream(model, prompts, s, use_cache, pad_id):
        for row, (tok, stopped) in enumerate(zip(nxt.tolist(), done.tolist())):
            if finished[row]:
                continue
            if stopped:
                finished[row] = True
                continue
            out[row].append(tok)
            if on_token:
                on_token(row, tok)
    return out
