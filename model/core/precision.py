"""The precision a run computes in. `fp32` computes in float32; `bf16` autocasts matrix
work to bfloat16 (weights and optimizer state stay float32); `auto`, the presets' choice,
is bf16 where the device has bfloat16 matrix units and fp32 where bf16 would be emulated.

Why `auto`: on a CPU without AVX512-BF16 or AMX, PyTorch emulates bf16 matrix products.
Measured on a 2-core AVX2 AMD EPYC: a 1024^3 bf16 product ran at 0.68 GFLOP/s against
40-51 GFLOP/s in float32, and the tiny preset's training step took 3.5 s in bf16, which
turns a fifteen-minute run into two hours. On CPUs with those units (and on every CUDA GPU
since Ampere) bf16 is the faster one.
"""

from __future__ import annotations

import functools

import torch

DTYPES = ("fp32", "bf16", "auto")


@functools.cache  # asked on every micro-step; the hardware does not change
def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 matrices in hardware."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return False


def resolve(dtype: str, device: torch.device) -> str:
    """"fp32" or "bf16": what a run asking for `dtype` computes in on `device`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return dtype


def emulated_warning(dtype: str, device: torch.device) -> str | None:
    """A warning for an explicit bf16 on a device that only emulates it (slow, as asked)."""
    if dtype == "bf16" and not native_bf16(device):
        return (f"dtype bf16 on {device}, which has no bf16 matrix units: PyTorch emulates it, often tens of "
                "times slower than fp32; set dtype to auto (bf16 only where it is native) or fp32")
    return None


def autocast(dtype: str, device: torch.device):
    """bf16 autocast, or none, as `dtype` resolves on `device`: what every training and
    post-training step computes under."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=resolve(dtype, device) == "bf16")
