"""The cost estimate before a pretraining run, and the time it took after."""

from __future__ import annotations

import dataclasses

import pytest

from model.core import flops
from model.core.config import DeviceCost
from stages.config import preset
from stages.training import cost


def test_the_estimate_is_flops_over_peak_times_mfu_and_prices_are_configuration():
    cfg = preset("default", {"cost.devices": {"h100": {"peak_tflops": 989.0, "mfu": 0.5, "price_per_hour": 2.5},
                                              "mine": {"peak_tflops": 100.0, "mfu": 0.25, "price_per_hour": 0.0}}})
    model = dataclasses.replace(cfg.model, vocab_size=32_000)
    est = cost.estimate(cfg, model, 1000)
    t = cfg.train
    tokens = t.batch_size * t.seq_len * t.micro_steps(1) * 1000
    total = flops.flops_per_token(model, t.seq_len) * tokens
    assert est["tokens"] == tokens and est["flops"] == pytest.approx(total)
    rows = {r["device"]: r for r in est["rows"]}
    assert set(rows) == {"cpu", "a100", "h100", "h200", "mine"}  # a device of one's own beside the others
    assert rows["h100"]["seconds"] == pytest.approx(total / (989e12 * 0.5), rel=1e-3)
    assert rows["h100"]["cost"] == pytest.approx(total / (989e12 * 0.5) / 3600 * 2.5, rel=1e-3)
    assert rows["mine"]["seconds"] == pytest.approx(4 * total / 100e12 / 0.25 / 4, rel=1e-3)
    line = cost.summary(est)
    assert line.startswith(f"estimate for {tokens:,} tokens") and "h100" in line and "$" in line


def test_cpu_is_measured_here():
    cfg = preset("tiny")
    assert isinstance(cfg.cost.devices["cpu"], DeviceCost) and cfg.cost.devices["cpu"].peak_tflops == 0
    est = cost.estimate(cfg, cfg.model, 10)
    cpu = next(r for r in est["rows"] if r["device"] == "cpu")
    assert cpu["peak_tflops"] > 0 and cpu["seconds"] > 0 and est["here"] == "cpu"


def test_the_time_taken_sums_the_processes_of_a_resumed_run():
    records = [{"event": "start"}, {"event": "step", "elapsed_s": 5.0}, {"event": "step", "elapsed_s": 9.0},
               {"event": "start"}, {"event": "step", "elapsed_s": 4.0}, {"event": "done", "elapsed_s": 6.0}]
    assert cost.actual_seconds(records) == 15.0
    est = {"here": "cpu", "rows": [{"device": "cpu", "seconds": 10.0, "mfu": 0.1}]}
    assert cost.compared(est, records) == {"estimated_s": 10.0, "actual_s": 15.0, "device": "cpu",
                                           "assumed_mfu": 0.1, "actual_over_estimate": 1.5}


def test_a_device_entry_is_checked_like_any_section():
    from stages.config import ConfigError

    with pytest.raises(ConfigError, match="unknown config key 'cost.devices.h100.peak'"):
        preset("tiny", {"cost.devices.h100.peak": 1.0})
    with pytest.raises(ConfigError, match="cost.devices.mine.peek"):
        preset("tiny", {"cost.devices.mine": {"peek": 1.0}})
    with pytest.raises(ConfigError, match="mfu"):
        preset("tiny", {"cost.devices.mine": {"peak_tflops": 1.0, "mfu": 0}})
