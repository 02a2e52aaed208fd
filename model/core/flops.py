"""Model FLOPs utilisation: FLOPs per token and the peak they are measured against."""

from __future__ import annotations

import time

import torch

from model.core.config import ModelConfig

# Dense bf16 / tf32-less fp32 tensor peaks per GPU (vendor datasheets, SXM parts), by name fragment.
GPU_PEAKS = {
    "H200": {"bf16": 989e12, "fp32": 67e12},
    "H100": {"bf16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362e12, "fp32": 91.6e12},
    "A10": {"bf16": 125e12, "fp32": 31.2e12},
    "RTX 4090": {"bf16": 165e12, "fp32": 82.6e12},
}


def flops_per_token(cfg: ModelConfig, seq: int) -> float:
    """6 x (parameters in matmuls) + 12 x layers x width x T for attention (PaLM, appendix B).
    Embeddings are a lookup: a tied table counts once (as the head), an untied input table not at all."""
    matmul_params = cfg.num_params() - (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.dim)
    return 6 * matmul_params + 12 * cfg.n_layers * cfg.dim * seq


def matmul_peak(dtype: torch.dtype, n: int = 1024, reps: int = 20, device: str = "cpu") -> float:
    """Measured FLOP/s of a square matmul at this precision (the CPU has no datasheet number
    that holds for a given thread count)."""
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    for _ in range(3):
        a @ b
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def peak_flops(device: torch.device, dtype: str) -> tuple[float, str]:
    """(FLOP/s, where the number comes from) for one device of this kind."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, peaks in GPU_PEAKS.items():
            if key in name:
                return peaks[dtype], f"{name} datasheet"
        return matmul_peak(torch.bfloat16 if dtype == "bf16" else torch.float32, n=8192, device=str(device)), \
            f"{name} measured matmul"
    return matmul_peak(torch.bfloat16 if dtype == "bf16" else torch.float32), "CPU measured matmul"
