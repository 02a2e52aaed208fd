"""The reward-hacking alarm, the reasoning format and the post-training config checks."""

import pytest

from model.post.config import GRPOConfig, PPOConfig, check
from pipelines.tasks.math_answers import has_reasoning_format
from stages.config import preset
from stages.reports.post_training import curve, hacking


def _steps(proxy: list[float], acc: list[float], key: str = "reward_model_score", stopped: float = 1.0):
    return [{"event": "step", "step": i + 1, key: p, "accuracy": a, "stopped": stopped}
            for i, (p, a) in enumerate(zip(proxy, acc))]


def test_hacking_fires_when_the_proxy_rises_and_dev_accuracy_falls():
    records = [{"event": "baseline", "step": 0, "eval_dev_accuracy": 0.6}, *_steps([0.1] * 4 + [0.9] * 4, [0.5] * 8)]
    records[-1]["eval_dev_accuracy"] = 0.4
    verdict = hacking(records)
    assert not verdict["passed"] and "greedy dev accuracy -0.200" in verdict["detail"]
    records[-1]["eval_dev_accuracy"] = 0.62  # the proxy rose and so did accuracy: fine
    assert hacking(records)["passed"]


def test_hacking_falls_back_to_rollout_accuracy_and_checks_length():
    assert not hacking(_steps([0.0] * 4 + [1.0] * 4, [0.5] * 4 + [0.3] * 4, key="reward_verifiable"))["passed"]
    assert hacking(_steps([0.0] * 4 + [1.0] * 4, [0.5] * 8, key="reward_verifiable"))["passed"]
    assert not hacking(_steps([0.0] * 8, [0.5] * 8, stopped=0.2))["passed"]  # replies run to the limit
    assert hacking(_steps([0.0] * 2, [0.5] * 2))["passed"]  # too few steps to judge


def test_curve_keeps_evaluations_and_thins_steps():
    records = [{"event": "step", "step": i, "loss": 1.0 / i, **({"eval_loss": 0.5} if i % 50 == 0 else {})}
               for i in range(1, 201)]
    rows = curve("sft", [{"event": "baseline", "step": 0, "eval_loss": 5.0}, *records], points=10)
    assert {r["step"] for r in rows} >= {0, 50, 100, 150, 200} and len(rows) <= 26
    assert rows[0] == {"step": 0, "loss": None, "eval_loss": 5.0, "epochs": None, "replay_loss": None}
    assert set(rows[0]) == {"step", "loss", "eval_loss", "epochs", "replay_loss"}


@pytest.mark.parametrize(("text", "ok"), [
    ("<think>3 + 4 = 7.</think><answer>7</answer>", True),
    (" <think>x</think> <answer>7</answer> ", True),
    ("<think>x</think><answer>7</answer> y nada más", False),
    ("<answer>7</answer>", False),
    ("<think>x</think>7", False),
    ("<think>x<think>y</think><answer>7</answer>", False),
    ("<think>x</think><answer>siete</answer>", False),
])
def test_reasoning_format(text, ok):
    assert has_reasoning_format(text) is ok


def test_config_checks_name_the_field():
    # field by field in tests/stages/test_config.py; the rule between two fields of one stage here
    with pytest.raises(ValueError, match="post.ppo.minibatches must be between 1 and batch_size"):
        check("ppo", PPOConfig(minibatches=99, batch_size=4))
    with pytest.raises(ValueError, match="group"):
        GRPOConfig(group=1)
    cfg = preset("tiny", {"post.ppo.betas": [0.9, 0.999]})
    assert cfg.post.ppo.betas == (0.9, 0.999) and cfg.post.sft.steps > 0
