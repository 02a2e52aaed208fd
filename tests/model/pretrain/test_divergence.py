"""Divergence: the detector's rules, then real pretraining runs with corrupted batches
(model.pretrain.faults): a spike rolls back to the checkpoint before it, goes on past the
batches that caused it and finishes; a crash right after the rollback resumes exactly."""

from __future__ import annotations

import json
import math

import pytest

from model.checkpoint import state as ckpt
from model.pretrain.divergence import Detector
from tests.support.pretrain_runs import events_of, losses_of, make_shards, train_in_process


def test_a_non_finite_loss_or_gradient_norm_is_bad_at_once():
    d = Detector(factor=3.0, window=10, patience=5)
    assert d.check(1, float("nan"), 1.0).nonfinite
    v = d.check(2, 2.0, float("inf"))
    assert v.nonfinite and "gradient norm" in v.problem and v.first_step == 2


def test_a_spike_is_judged_against_the_median_and_needs_patience():
    d = Detector(factor=2.0, window=8, patience=2)
    for step, loss in enumerate([3.0, 3.1, 2.9, 3.0, 3.0, 30.0, 3.0], start=1):  # one outlier, under patience
        assert d.check(step, loss, 1.0) is None, step
    assert 30.0 not in d.recent  # it does not raise the bar for the next one
    assert d.check(8, 7.0, 1.0) is None  # 7 > 2 x median 3.0: the first of a streak
    v = d.check(9, 8.0, 1.0)
    assert v is not None and v.first_step == 8 and "2 steps in a row from step 8" in v.problem
    d2 = Detector(factor=0.0, window=8, patience=1)  # factor 0: no spike detection
    assert all(d2.check(s, 100.0 * s, 1.0) is None for s in range(1, 20))


def test_the_detector_state_travels_with_the_checkpoint():
    d = Detector(2.0, 4, 2)
    for s, loss in enumerate([1.0, 2.0, 3.0, 4.0, 5.0], start=1):
        d.check(s, loss, 1.0)
    d.check(6, 50.0, 1.0)
    again = Detector(2.0, 4, 2)
    again.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert list(again.recent) == [2.0, 3.0, 4.0, 5.0] and again.streak == [6]


SPIKE = {"steps": 30, "lr": 3e-3, "min_lr": 3e-4, "warmup": 2, "eval_every": 5, "checkpoint_every": 5,
         "early_stop_patience": 0, "spike_factor": 3.0, "spike_window": 10, "spike_patience": 2,
         "on_nonfinite": "rollback", "rollback_lr_factor": 0.5}


@pytest.fixture
def corrupted(monkeypatch):
    """Batches 13 and 14 of the run are corrupted (their loss x 100)."""
    monkeypatch.setenv("YUNQUE_FAULT_BAD_BATCHES", "13,14")


def test_a_spike_rolls_back_skips_the_batches_and_finishes(tmp_path, corrupted):
    shards = make_shards(tmp_path / "data")
    out = train_in_process(tmp_path, "rb", shards, **SPIKE)
    bad = events_of(out, "bad_step")
    assert [(b["step"], b["action"]) for b in bad] == [(14, "rollback")]  # step 13 alone is under patience
    (rb,) = events_of(out, "rollback")
    assert (rb["step"], rb["to_step"], rb["skipped_steps"], rb["skipped_batches"]) == (14, 10, 4, 4)
    assert rb["lr_scale"] == 0.5 and "loss spike" in rb["problem"]
    losses = losses_of(out)
    assert sorted(losses) == list(range(1, 31)) and all(math.isfinite(v) for v in losses.values())
    assert max(losses[s] for s in range(11, 31)) < 3 * min(losses[s] for s in range(5, 11))  # no spike left
    # the run went on with the batches after the corrupted ones: 30 steps, 34 batches drawn
    last = ckpt.latest(out).state()
    assert last["divergence"]["batches"] == 34 and len(last["divergence"]["rollbacks"]) == 1
    steps = events_of(out, "step")
    assert steps[-1]["rollbacks"] == 1 and steps[-1]["bad_steps"] == 1  # step 13 alone was no verdict
    first, again = (s for s in steps if s["step"] == 11)  # step 11 before the rollback, and after it
    assert again["lr"] == pytest.approx(0.5 * first["lr"])


def test_a_crash_right_after_a_rollback_resumes_identically(tmp_path, corrupted, monkeypatch):
    shards = make_shards(tmp_path / "data")
    straight = train_in_process(tmp_path, "straight", shards, **SPIKE)

    import model.pretrain.train

    real_save = ckpt.save
    saves = []

    def save_then_die(root, step, *args, **kwargs):
        found = real_save(root, step, *args, **kwargs)
        saves.append(step)
        if saves.count(10) == 2:  # the rolled-back checkpoint, written again: the process dies there
            raise KeyboardInterrupt("killed after the rollback")
        return found

    monkeypatch.setattr(model.pretrain.train.ckpt, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_in_process(tmp_path, "crashed", shards, **SPIKE)
    monkeypatch.setattr(model.pretrain.train.ckpt, "save", real_save)
    assert [c.step for c in ckpt.all_checkpoints(tmp_path / "crashed")] == [5, 10]  # the branch's 15 is gone
    crashed = train_in_process(tmp_path, "crashed", shards, **SPIKE)
    assert [e["step"] for e in events_of(crashed, "resume")] == [10]
    assert losses_of(crashed) == losses_of(straight)  # bit for bit, the rollback's skip and learning rate kept
    assert len(events_of(crashed, "rollback")) == 1  # the corrupted batches are not met again


def test_warn_trains_on_and_stop_stops(tmp_path, corrupted):
    from model.pretrain.train import TrainingStopped

    shards = make_shards(tmp_path / "data")
    out = train_in_process(tmp_path, "warn", shards, **(SPIKE | {"on_nonfinite": "warn"}))
    assert [b["action"] for b in events_of(out, "bad_step")] == ["warn"] and not events_of(out, "rollback")
    assert sorted(losses_of(out)) == list(range(1, 31))
    with pytest.raises(TrainingStopped, match="step 14: loss spike"):
        train_in_process(tmp_path, "stop", shards, **(SPIKE | {"on_nonfinite": "stop"}))
