"""The pretraining program for real: checkpoints, kill -9 and exact resume, a corrupted
checkpoint, two gloo processes under torchrun against one."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from model.checkpoint import state as ckpt
from tests.support.pretrain_runs import (
    VOCAB,
    events_of,
    losses_of,
    make_shards,
    train_env,
    train_in_process,
    write_train_config,
)


def _run(config: Path, *launcher: str) -> subprocess.CompletedProcess:
    cmd = [*launcher, "-m", "model.pretrain.train", "--config", str(config)] if launcher else \
        [sys.executable, "-m", "model.pretrain.train", "--config", str(config)]
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=train_env())
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_trains_and_checkpoints(tmp_path):
    shards = make_shards(tmp_path / "data")
    _run(write_train_config(tmp_path, "a", shards))
    losses = losses_of(tmp_path / "a")
    assert sorted(losses) == list(range(1, 31))
    assert losses[30] < losses[1] - 0.5
    kept = ckpt.all_checkpoints(tmp_path / "a")
    assert [c.step for c in kept] == [10, 20, 30]
    state = ckpt.latest(tmp_path / "a").state()
    assert state["step"] == 30 and state["loader"]["cursor"] > 0 and "val_loss" in state["metrics"]


def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path):
    shards = make_shards(tmp_path / "data")
    _run(write_train_config(tmp_path, "straight", shards))
    config = write_train_config(tmp_path, "killed", shards, steps=30)
    proc = subprocess.Popen([sys.executable, "-m", "model.pretrain.train", "--config", str(config)], env=train_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "killed" / "step-00000010"
    deadline = time.time() + 120
    while not first.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.exists(), "no checkpoint before the kill"
    at_kill = ckpt.latest(tmp_path / "killed").step
    assert at_kill < 30, "the run finished before it was killed"
    _run(config)
    straight, resumed = losses_of(tmp_path / "straight"), losses_of(tmp_path / "killed")
    assert sorted(resumed) == sorted(straight)
    assert all(resumed[s] == straight[s] for s in straight), [(s, straight[s], resumed[s]) for s in straight
                                                              if resumed[s] != straight[s]][:5]
    events = [json.loads(x) for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "resume"] == [at_kill]


def test_corrupted_latest_checkpoint_falls_back(tmp_path, caplog):
    shards = make_shards(tmp_path / "data")
    _run(write_train_config(tmp_path, "c", shards, steps=20))
    newest = tmp_path / "c" / "step-00000020" / "model.safetensors"
    data = bytearray(newest.read_bytes())
    data[-10] ^= 0xFF
    newest.write_bytes(bytes(data))
    found = ckpt.latest(tmp_path / "c")
    assert found.step == 10 and "checksum mismatch" in caplog.text


def test_two_gloo_processes_match_one_at_the_same_global_batch(tmp_path):
    shards = make_shards(tmp_path / "data")
    _run(write_train_config(tmp_path, "one", shards, steps=12, batch_size=4))
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    _run(write_train_config(tmp_path, "two", shards, steps=12, batch_size=2), torchrun, "--standalone", "--nproc-per-node", "2")
    one, two = losses_of(tmp_path / "one"), losses_of(tmp_path / "two")
    assert sorted(one) == sorted(two)
    assert max(abs(one[s] - two[s]) for s in one) < 1e-4


@pytest.mark.parametrize("kind", ["cosine", "wsd"])
def test_schedules(kind):
    from model.core.schedule import lr_at

    lrs = [lr_at(s, lr=1.0, min_lr=0.1, warmup=10, total=100, kind=kind) for s in range(101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[100] == pytest.approx(0.1) and min(lrs[10:]) >= 0.1 - 1e-9
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(lrs[10:]))  # never rises after warmup
    if kind == "cosine":  # half-way through the decay, half-way between the peak and the floor
        assert lrs[55] == pytest.approx(0.55)
    else:  # the stable phase holds the peak until the last 20%, then a straight line down
        assert lrs[10:80] == [1.0] * 70
        assert lrs[90] == pytest.approx(0.55)
        assert lrs[85] - lrs[86] == pytest.approx(lrs[95] - lrs[96])


def test_preflight_refuses_what_cannot_fit_and_names_the_fix():
    from model.core.config import preset
    from model.pretrain.preflight import PreflightError, check, plan

    m = preset("1b")
    p = plan(m, batch_size=16, seq_len=2048, device="cpu", memory=24 * 2**30, train_tokens=10**9)
    assert not p.fits and p.parameters == m.num_params()
    assert p.weights_bytes + p.grads_bytes + p.optimizer_bytes == 16 * m.num_params()
    assert p.activations_checkpointed_bytes < p.activations_bytes
    with pytest.raises(PreflightError, match="(?s)DOES NOT FIT.*batch_size 2 with grad_accum 8.*checkpointing.*FSDP"):
        check(p)
    # the named fix does fit, at the same tokens per step
    fixed = plan(m, batch_size=2, grad_accum=8, seq_len=2048, device="cpu", memory=24 * 2**30,
                 activation_checkpointing=True)
    assert fixed.fits and fixed.tokens_per_step == p.tokens_per_step
    small = plan(preset("tiny"), batch_size=64, seq_len=256, device="cpu", memory=256 * 2**20, train_tokens=400_000)
    assert not small.fits and "grad_accum" in small.summary()
    ok = plan(preset("tiny"), batch_size=8, seq_len=256, device="cpu", memory=24 * 2**30, train_tokens=400_000)
    assert ok.fits and "tokens per parameter" in ok.summary()


def test_the_program_refuses_before_training(tmp_path):
    shards = make_shards(tmp_path / "data")
    config = write_train_config(tmp_path, "big", shards, batch_size=4)
    raw = json.loads(config.read_text())
    raw["model"] |= {"dim": 8192, "n_layers": 48, "n_heads": 64, "ffn_dim": 28672, "context": 32}  # ~40B
    config.write_text(json.dumps(raw))
    p = subprocess.run([sys.executable, "-m", "model.pretrain.train", "--config", str(config)], check=False,
                       capture_output=True, text=True, timeout=300, env=train_env())
    assert p.returncode == 4 and "DOES NOT FIT" in p.stderr
    assert not ckpt.all_checkpoints(tmp_path / "big")


def test_activation_checkpointing_gives_the_same_gradients():
    import torch

    from model.core.config import ModelConfig
    from model.core.gpt import GPT

    torch.manual_seed(0)
    model = GPT(ModelConfig(dim=32, n_layers=2, n_heads=2, ffn_dim=64, context=16, vocab_size=VOCAB))
    x = torch.randint(0, VOCAB, (2, 17))
    grads = []
    for flag in (False, True):
        model.activation_checkpointing = flag
        model.zero_grad()
        model(x[:, :-1], x[:, 1:])[1].backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


def test_fsdp2_on_two_gloo_processes_matches_ddp_and_resumes(tmp_path):
    """FSDP2 (fully_shard) computes what DDP computes, and its checkpoints (full state
    dicts) resume exactly, here on CPU with gloo."""
    shards = make_shards(tmp_path / "data")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    _run(write_train_config(tmp_path, "ddp", shards, steps=12, batch_size=2, checkpoint_every=6), *torchrun)
    _run(write_train_config(tmp_path, "fsdp", shards, steps=12, batch_size=2, checkpoint_every=6, fsdp=True), *torchrun)
    ddp, fsdp = losses_of(tmp_path / "ddp"), losses_of(tmp_path / "fsdp")
    assert sorted(fsdp) == list(range(1, 13))
    assert max(abs(ddp[s] - fsdp[s]) for s in ddp) < 1e-4
    # resume FSDP from its step-6 checkpoint: the same losses after it (step 10's, the best
    # evaluation's checkpoint, goes too)
    import shutil

    for later in [c for c in ckpt.all_checkpoints(tmp_path / "fsdp") if c.step > 6]:
        shutil.rmtree(later.path)
    (tmp_path / "fsdp" / "metrics.jsonl").unlink()
    _run(write_train_config(tmp_path, "fsdp", shards, steps=12, batch_size=2, checkpoint_every=6, fsdp=True), *torchrun)
    resumed = losses_of(tmp_path / "fsdp")
    assert sorted(resumed) == list(range(7, 13))
    assert max(abs(resumed[s] - fsdp[s]) for s in resumed) < 1e-6


def test_muon_trains(tmp_path):
    shards = make_shards(tmp_path / "data")
    _run(write_train_config(tmp_path, "muon", shards, optimizer="muon", muon_lr=0.02))
    losses = losses_of(tmp_path / "muon")
    assert losses[30] < losses[1] - 0.5
    state = torch.load(ckpt.latest(tmp_path / "muon").path / "optimizer.pt", weights_only=True)
    assert set(state) == {"muon", "adamw"}


# Early stopping and the best checkpoint (model.pretrain.early_stop), in-process on a corpus small
# enough to memorise: two training documents of a bigram chain with 50% noise. Validation
# loss falls while the model learns the chain (to step 10), then rises as it memorises noise.
def _tiny_corpus(root: Path) -> list[str]:
    return make_shards(root, 1, docs=(2, 4), length=80, noise=0.5, seed=1, names=("tiny",))


def _evals(out: Path) -> dict[int, float]:
    return {r["step"]: r["val_loss"] for r in events_of(out, "step") if "val_loss" in r}


def test_early_stopping_stops_and_records_the_best_checkpoint(tmp_path):
    from stages.training.runs import ended

    shards = _tiny_corpus(tmp_path / "data")
    out = train_in_process(tmp_path, "es", shards, keep_checkpoints=1)
    (stop,) = events_of(out, "early_stop")
    evals = _evals(out)
    best_step = min(evals, key=evals.get)
    assert stop["step"] < 80 and max(evals) == stop["step"]
    assert best_step > 2 and best_step % 4  # it improved a while; its checkpoint is an extra one
    assert stop["best_step"] == best_step and stop["best_val_loss"] == evals[best_step]
    assert stop["step"] - best_step == 3 * 2  # three evaluations without improvement
    best = json.loads((out / "best.json").read_text())
    assert (best["step"], best["val_loss"], best["stopped_at"]) == (best_step, evals[best_step], stop["step"])
    # rotation (keep 1) kept the best beside the last; both intact
    assert [c.step for c in ckpt.all_checkpoints(out)] == [best_step, stop["step"]]
    assert ckpt.Checkpoint(Path(best["path"]), best_step).state()["early_stop"]["best_step"] == best_step
    # the stages: the run has ended, and what they record is the best checkpoint
    end = ended(out, 80, 3)
    assert (end.recorded.step, end.last.step, end.stopped_at) == (best_step, stop["step"], stop["step"])
    assert f"best step {best_step}" in end.early_stop
    assert ended(out, 80, 0) is None and ended(out, 80, 10) is None  # off, or more patience: train on
    # a re-run stops at once, at the same step, training nothing
    train_in_process(tmp_path, "es", shards, keep_checkpoints=1)
    assert max(_evals(out)) == stop["step"] and [e["step"] for e in events_of(out, "early_stop")] == [stop["step"]] * 2


def test_early_stop_resume_after_a_crash_stops_at_the_same_step(tmp_path, monkeypatch):
    shards = _tiny_corpus(tmp_path / "data")
    straight = train_in_process(tmp_path, "straight", shards)
    (stop,) = events_of(straight, "early_stop")
    saved = [e["step"] for e in events_of(straight, "checkpoint")]
    crash_at = next(s for s in saved if stop["best_step"] < s < stop["step"])  # evals_since_best > 0 there

    import model.pretrain.train

    real_save = ckpt.save

    def save_then_die(root, step, *args, **kwargs):
        found = real_save(root, step, *args, **kwargs)
        if step == crash_at:
            raise KeyboardInterrupt("killed")
        return found

    monkeypatch.setattr(model.pretrain.train.ckpt, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_in_process(tmp_path, "crashed", shards)
    monkeypatch.setattr(model.pretrain.train.ckpt, "save", real_save)
    crashed = train_in_process(tmp_path, "crashed", shards)
    assert [e["step"] for e in events_of(crashed, "resume")] == [crash_at]
    (again,) = events_of(crashed, "early_stop")
    assert {k: again[k] for k in ("step", "best_step", "best_val_loss")} == \
        {k: stop[k] for k in ("step", "best_step", "best_val_loss")}
    assert _evals(crashed) == _evals(straight) and losses_of(crashed) == losses_of(straight)
    assert json.loads((crashed / "best.json").read_text())["stopped_at"] == stop["step"]


def test_rotation_keeps_the_protected_best(tmp_path):
    weights = {"w": torch.zeros(2)}
    for step in range(1, 6):
        ckpt.save(tmp_path, step, weights, {}, {}, keep=2, protect={2})
    assert [c.step for c in ckpt.all_checkpoints(tmp_path)] == [2, 4, 5]
    ckpt.save(tmp_path, 6, weights, {}, {}, keep=2, protect={5})  # a new best: the old one goes
    assert [c.step for c in ckpt.all_checkpoints(tmp_path)] == [5, 6]


def test_patience_0_never_stops(tmp_path):
    out = train_in_process(tmp_path, "off", _tiny_corpus(tmp_path / "data"), steps=24, early_stop_patience=0)
    evals = _evals(out)
    assert not events_of(out, "early_stop") and max(evals) == 24
    best = json.loads((out / "best.json").read_text())  # the best is still named, for the stages
    assert best["step"] == min(evals, key=evals.get) < 24 and best["stopped_at"] is None and best["last_step"] == 24
    assert ckpt.latest(out).step == 24
