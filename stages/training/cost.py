"""What a pretraining run will cost, before it starts, and what it took, after.

Before: the run's training FLOPs (model.core.flops.flops_per_token: 6N plus attention,
times the tokens of its steps) over each configured device's peak times the MFU assumed
on it (`cost.devices`: this machine's CPU, measured with a matmul, and A100, H100, H200
from their datasheets), then times the device's price per hour. Per device, for the
run's tokens per step on one device of the kind; N devices take about 1/N of the time at
the same cost. After: the time the run's processes took against the estimate for the
device it ran on.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from model.core.config import ModelConfig
from stages.config import YunqueConfig


def here() -> str:
    """The device kind this machine trains on, as `cost.devices` names it."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).lower()
        return next((k for k in ("h200", "h100", "a100") if k in name), name)
    return "cpu"


def estimate(cfg: YunqueConfig, model: ModelConfig, steps: int) -> dict[str, Any]:
    """{"flops", "tokens", "here", "rows": [{device, peak_tflops, mfu, seconds, price_per_hour, cost}]}."""
    import torch

    from model.core import flops, precision

    t = cfg.train
    tokens = t.batch_size * t.seq_len * t.micro_steps(1) * steps
    total = flops.flops_per_token(model, t.seq_len) * tokens
    rows = []
    for name, dev in cfg.cost.devices.items():
        peak = dev.peak_tflops * 1e12
        if peak == 0:  # this machine's CPU: no datasheet figure holds for a thread count
            peak = _cpu_peak(precision.resolve(t.dtype, torch.device("cpu")))
        seconds = total / (peak * dev.mfu)
        rows.append({"device": name, "peak_tflops": round(peak / 1e12, 3), "mfu": dev.mfu,
                     "seconds": float(f"{seconds:.4g}"), "price_per_hour": dev.price_per_hour,
                     "cost": float(f"{seconds / 3600 * dev.price_per_hour:.4g}")})
    return {"flops": total, "tokens": tokens, "here": here(), "rows": rows}


@lru_cache(maxsize=2)
def _cpu_peak(dtype: str) -> float:
    """Measured once per process (a matmul of a fraction of a second)."""
    import torch

    from model.core import flops

    return flops.peak_flops(torch.device("cpu"), dtype)[0]


def summary(est: dict[str, Any]) -> str:
    """One line: the time and cost on each device kind."""
    def one(r: dict) -> str:
        s = r["seconds"]
        when = f"{s:.2g} s" if s < 60 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:,.1f} h"
        return f"{r['device']} {when}" + (f" (${r['cost']:,.2f})" if r["price_per_hour"] else "")
    return (f"estimate for {est['tokens']:,} tokens ({est['flops']:.3g} FLOPs) on one device: "
            + ", ".join(one(r) for r in est["rows"]))


def actual_seconds(records: list[dict]) -> float:
    """Seconds the run's training processes took: each process's last elapsed time, summed
    over the processes of the run (a resume starts its clock again)."""
    total, current = 0.0, 0.0
    for r in records:
        if r.get("event") == "start":
            total, current = total + current, 0.0
        elif "elapsed_s" in r:
            current = max(current, float(r["elapsed_s"]))
    return total + current


def compared(est: dict[str, Any], records: list[dict]) -> dict[str, Any]:
    """The estimate for the device the run was on, against the time it took."""
    row = next((r for r in est["rows"] if r["device"] == est["here"]), None)
    took = actual_seconds(records)
    if row is None or not took:
        return {}
    planned = row["seconds"]
    return {"estimated_s": float(f"{planned:.4g}"), "actual_s": float(f"{took:.4g}"), "device": row["device"],
            "assumed_mfu": row["mfu"], "actual_over_estimate": round(took / planned, 2) if planned else None}
