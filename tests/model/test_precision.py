"""model.core.precision: `auto` is bf16 only where the device multiplies bf16 in hardware, and
the training and post-training autocasts follow what it resolves to."""

from __future__ import annotations

import pytest
import torch

from model.core import precision
from model.core.config import train_tiny
from model.post.config import tiny as post_tiny

CPU = torch.device("cpu")


@pytest.mark.parametrize("native", [True, False])
def test_auto_follows_the_hardware_and_explicit_choices_are_kept(monkeypatch, native):
    monkeypatch.setattr(precision, "native_bf16", lambda device: native)
    assert precision.resolve("auto", CPU) == ("bf16" if native else "fp32")
    assert precision.resolve("bf16", CPU) == "bf16" and precision.resolve("fp32", CPU) == "fp32"
    assert (precision.emulated_warning("bf16", CPU) is None) == native
    assert precision.emulated_warning("auto", CPU) is None
    with precision.autocast("auto", CPU):
        assert torch.is_autocast_enabled("cpu") == native
    with precision.autocast("fp32", CPU):
        assert not torch.is_autocast_enabled("cpu")


def test_presets_ask_for_auto_and_unknown_dtypes_fail():
    assert train_tiny().dtype == "auto"
    assert post_tiny().sft.dtype == "auto" and post_tiny().reward.dtype == "auto"
    with pytest.raises(ValueError, match="fp16"):
        precision.resolve("fp16", CPU)
