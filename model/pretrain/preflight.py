"""The plan printed before a training run: parameters, tokens against the 20-100 tokens
per parameter rule, the tokens and effective epochs of each source of a mixture, and a memory estimate against the device, refusing a run that cannot
fit with the fixes named.

The activation estimate counts the tensors autograd keeps per token and layer for this
architecture (inputs of both norms and of every projection, q/k/v, the attention output,
the SwiGLU gate/up/product) plus the attention probabilities where the kernel
materialises them (the CPU math path does, the flash kernels on GPU do not), and the
logits with their fp32 copy for the loss. With activation checkpointing only each
layer's input is kept, plus one layer's activations during its recomputation.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from model.core.config import ModelConfig

GIB = 2**30


class PreflightError(RuntimeError):
    pass


@dataclass
class Plan:
    parameters: int
    tokens_per_step: int
    train_tokens: int | None
    tokens_per_parameter: float | None
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    activations_checkpointed_bytes: int
    device: str
    device_memory_bytes: int
    activation_checkpointing: bool = False
    advice: list[str] = field(default_factory=list)
    # a mixture's sources: name, weight (share of windows), train_tokens (held), tokens_drawn
    # (what this run's steps draw from it) and epochs (drawn / held: above 1 is up-sampling)
    sources: list[dict] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        act = self.activations_checkpointed_bytes if self.activation_checkpointing else self.activations_bytes
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + act

    @property
    def fits(self) -> bool:
        return self.total_bytes <= 0.9 * self.device_memory_bytes  # headroom for the allocator and the runtime

    def to_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes, "fits": self.fits}

    def summary(self) -> str:
        def gb(b: int) -> str:
            return f"{b / GIB:.2f} GiB"

        tpp = f"{self.tokens_per_parameter:.2f}" if self.tokens_per_parameter is not None else "?"
        lines = [
            (f"parameters {self.parameters / 1e6:.2f}M; {self.tokens_per_step:,} tokens per step; "
             f"{self.train_tokens or 0:,} training tokens = {tpp} per parameter (rule of thumb 20-100)"),
            (f"memory: weights {gb(self.weights_bytes)} + gradients {gb(self.grads_bytes)} + AdamW "
             f"{gb(self.optimizer_bytes)} + activations {gb(self.activations_bytes)} "
             f"({gb(self.activations_checkpointed_bytes)} with activation checkpointing) = {gb(self.total_bytes)} "
             f"of {gb(self.device_memory_bytes)} on {self.device}: {'fits' if self.fits else 'DOES NOT FIT'}"),
        ]
        lines += [f"source {s['name']}: {s['weight']:.1%} of windows, {s['tokens_drawn']:,} of {s['train_tokens']:,} "
                  f"tokens = {s['epochs']:.2f} epochs" for s in self.sources]
        return "\n".join(lines + [f"  - {a}" for a in self.advice])


def device_memory(device: str) -> int:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info()[1]
    with open("/proc/meminfo") as f:  # what the run can use, not what the machine has
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def activation_bytes(m: ModelConfig, batch: int, seq: int, dtype: str, device: str, checkpointed: bool) -> int:
    e = 2 if dtype == "bf16" else 4
    kv = m.kv_heads * m.head_dim
    per_token_layer = (6 * m.dim + 2 * kv + 3 * m.ffn_dim) * e  # norms, q, o-in, residuals; k, v; gate, up, product
    scores = m.n_heads * seq * e * 2 if not device.startswith("cuda") else 0  # probabilities + dropout-free softmax grad
    layer = batch * seq * (per_token_layer + scores)
    logits = batch * seq * m.vocab_size * (e + 4)
    if checkpointed:
        return m.n_layers * batch * seq * m.dim * e + layer + logits
    return m.n_layers * layer + logits


def plan(m: ModelConfig, *, batch_size: int, seq_len: int, grad_accum: int = 1, world_size: int = 1,
         dtype: str = "fp32", device: str = "cpu", train_tokens: int | None = None,
         memory: int | None = None, activation_checkpointing: bool = False, fsdp: bool = False,
         steps: int | None = None, sources: list[dict] | None = None) -> Plan:
    """Per-rank memory (FSDP divides weights, gradients and optimizer state by the world).
    `sources` (name, weight, train_tokens; a mixture's, model.pretrain.data.MixtureWindows.source_tokens)
    with `steps` (this run's) add the tokens each source gives and its effective epochs."""
    n = m.num_params()
    shard = world_size if fsdp else 1
    p = Plan(
        parameters=n, tokens_per_step=batch_size * seq_len * grad_accum * world_size, train_tokens=train_tokens,
        tokens_per_parameter=train_tokens / n if train_tokens is not None else None,
        weights_bytes=4 * n // shard, grads_bytes=4 * n // shard, optimizer_bytes=8 * n // shard,
        activations_bytes=activation_bytes(m, batch_size, seq_len, dtype, device, False),
        activations_checkpointed_bytes=activation_bytes(m, batch_size, seq_len, dtype, device, True),
        device=device, device_memory_bytes=memory if memory is not None else device_memory(device),
        activation_checkpointing=activation_checkpointing,
    )
    p.sources = [_drawn(s, p.tokens_per_step * (steps or 0)) for s in sources or []]
    if p.tokens_per_parameter is not None and p.tokens_per_parameter < 20:
        p.advice.append(f"only {p.tokens_per_parameter:.2f} tokens per parameter: expect overfitting; "
                        "add data or choose a smaller preset")
    if not p.fits:
        p.advice += _fixes(p, m, batch_size, seq_len, grad_accum, world_size, dtype, device, fsdp)
    return p


def _drawn(source: dict, run_tokens: int) -> dict:
    drawn = round(source["weight"] * run_tokens)
    held = int(source["train_tokens"])
    return {**source, "tokens_drawn": drawn, "epochs": round(drawn / held, 4) if held else 0.0}


def _fixes(p: Plan, m: ModelConfig, batch: int, seq: int, accum: int, world: int, dtype: str, device: str,
           fsdp: bool) -> list[str]:
    budget = 0.9 * p.device_memory_bytes - p.weights_bytes - p.grads_bytes - p.optimizer_bytes
    fixes = []
    if budget > 0:
        for ckpt in sorted({p.activation_checkpointing, True}):  # without it first, if that is how it runs
            b = next((b for b in range(batch - 1, 0, -1) if batch % b == 0
                      and activation_bytes(m, b, seq, dtype, device, ckpt) <= budget), None)
            if b is not None:
                extra = " and activation checkpointing" if ckpt and not p.activation_checkpointing else ""
                fixes.append(f"batch_size {b} with grad_accum {accum * batch // b} (the same tokens per step){extra}")
                break
        if not p.activation_checkpointing and p.activations_checkpointed_bytes <= budget:
            fixes.append("activation checkpointing (activation_checkpointing: true)")
    if not fsdp or world == 1:
        fixes.append("FSDP across more GPUs (weights, gradients and AdamW state are "
                     f"{(p.weights_bytes + p.grads_bytes + p.optimizer_bytes) / GIB:.1f} GiB unsharded)")
    return ["does not fit; fixes: " + "; or ".join(fixes)]


def check(p: Plan) -> None:
    if not p.fits:
        raise PreflightError(p.summary())
