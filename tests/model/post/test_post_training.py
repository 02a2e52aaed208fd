"""The post-training chain end to end on CPU: every stage through Dagster's materialize()
(torchrun under Pipes, MLflow, checkpoints), the report's row per stage, the lineage,
and exact resume of the training program."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import torch
from safetensors.torch import load_file

from tests.support.factory import tiny_checkpoint
from tests.support.post_homes import SMALL, TRAIN_IDS, base_with_shards, recorded_base_home
from yunque import env


@pytest.fixture()
def home(tmp_path, monkeypatch):
    return recorded_base_home(tmp_path, monkeypatch)


def _materialize(home, keys, overrides=SMALL) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS, build_resources

    resources = build_resources(home=str(home), corpus=str(home / "corpus"), overrides=json.dumps(overrides))
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys),
                          instance=dg.DagsterInstance.get(), resources=resources, raise_on_error=False)


def _md(result, key: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(key)[0].metadata.items()}


def test_whole_chain_materializes_with_a_report_row_per_stage(home):
    keys = ("sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model", "eval_report")
    result = _materialize(home, keys)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    data = home / "data"
    for asset in keys[:-1]:
        md = _md(result, asset)
        assert md["step"] == 2 and md["cached"] is False, (asset, md)
        assert (data / asset / "step-00000002" / "checksums.json").exists()
    assert _md(result, "sft_model")["eval_loss"] > 0
    md = _md(result, "sft_model")  # the preset replays pretraining text in SFT, the stage that forgets
    assert md["replay_loss"] > 0 and md["replay_tokens"] > 0 and "replay: " in md["plan"]
    assert "chitchat 100" in md["plan"]  # the SFT mixture: math and conversational turns (no documents here)
    assert json.loads((data / "sft_model" / "train_config.json").read_text())["mixture"] == {
        "chitchat": str(data / "sft_model" / "mixture" / "chitchat.jsonl")}
    for asset in ("sft_model", "dpo_model", "ppo_model", "grpo_model"):
        config = json.loads((data / asset / "train_config.json").read_text())  # resolved in the home
        assert config["replay_shards"] == [str(data / "token_shards" / "corpus")], asset
    for asset in ("reward_model", "dpo_model", "ppo_model", "grpo_model"):
        assert "replay_loss" not in _md(result, asset), asset
    # the held-out numbers in the metadata are those of the final checkpoint: recomputed here
    # from its weights (and the reward model's score head) on the held-out pairs
    for asset, recompute in (("reward_model", _reward_heldout), ("dpo_model", _dpo_heldout)):
        md, expected = _md(result, asset), recompute(data / asset)
        last = [json.loads(line) for line in (data / asset / "metrics.jsonl").read_text().splitlines()][-2]
        assert last["event"] == "step" and last["step"] == 2
        for key, (value, tolerance) in expected.items():
            assert md[key] == last[key], (asset, key)  # the metadata is the last step's record
            assert md[key] == pytest.approx(value, abs=tolerance), (asset, key, md[key], value)
    for rl in ("ppo_model", "grpo_model"):  # reward, KL and reply length per step
        md = _md(result, rl)
        assert {"kl", "reply_tokens", "accuracy", "eval_dev_accuracy"} <= md.keys()
        assert [r.data["step"] for r in md["curve"].records] == [0, 1, 2]  # the baseline, then each step
    assert "reward_model_score" in _md(result, "ppo_model")
    # the reward model and the value head live beside the language model's weights
    assert set(load_file(data / "reward_model" / "step-00000002" / "heads.safetensors")) == {"score.weight",
                                                                                               "score.bias"}
    assert "value.weight" in load_file(data / "ppo_model" / "step-00000002" / "heads.safetensors")

    checks = {c.asset_key.to_user_string(): c for c in result.get_asset_check_evaluations()
              if c.asset_key.to_user_string() in keys[:-1]}
    assert checks["sft_model"].check_name == "loss_mask_assistant_only" and checks["sft_model"].passed
    assert {c.check_name for c in checks.values()} >= {"heldout_pair_accuracy_above_chance", "no_reward_hacking"}

    report = _md(result, "eval_report")
    assert report["stages"] == ["base_model", "sft_model", "dpo_model", "ppo_model", "grpo_model"]
    assert all("math_accuracy" in report["figures"][s] for s in report["stages"])

    assert report["outdated"] == []

    # lineage: GRPO's record leads back through PPO, DPO and SFT to the base checkpoint, each
    # parent as it was when consumed, which is its current record; PPO's names its reward model
    from stages.training.lineage import chain

    records = {a: json.loads((data / a / "materialized.json").read_text()) for a in keys[:-1] + ("base_model",)}
    grpo = records["grpo_model"]
    assert [r["asset"] for r in chain(grpo)] == ["grpo_model", "ppo_model", "dpo_model", "sft_model", "base_model"]
    assert all(r == records[r["asset"]] for r in chain(grpo)[1:])
    assert records["ppo_model"]["reward_model"] == records["reward_model"]
    assert {r["dagster_run_id"] for r in chain(grpo)[:-1]} == {result.run_id}
    assert all(r["step"] == r["final_step"] == 2 for r in chain(grpo)[:-1])

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow/mlflow.db")
    run = client.get_run(_md(result, "grpo_model")["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["yunque.stage"] == "grpo"
    assert {"kl", "reply_tokens", "accuracy"} <= run.data.metrics.keys()
    assert len(client.get_metric_history(run.info.run_id, "kl")) == 2
    # the chain it was trained from, as tags (the reward model through PPO); the recipe as params
    tags = run.data.tags
    assert tags["yunque.ppo.weights"] == records["ppo_model"]["weights_sha256"]
    assert tags["yunque.reward.weights"] == records["reward_model"]["weights_sha256"]
    assert tags["yunque.base.weights"] == records["base_model"]["weights_sha256"]
    assert run.data.params["train.steps"] == "2" and not any(k.startswith("lineage.") for k in run.data.params)

    # unchanged recipe and inputs: nothing retrains, and the records still name the run that trained
    again = _materialize(home, ("sft_model", "dpo_model"))
    assert again.success and _md(again, "sft_model")["cached"] and _md(again, "dpo_model")["cached"]
    assert json.loads((data / "sft_model" / "materialized.json").read_text()) == records["sft_model"]


def _heldout_pairs(stage_dir):
    """The stage's run config, its held-out pairs (as the program splits the built-in set)
    and the final checkpoint, loaded."""
    from model.checkpoint.load import load
    from pipelines.tasks.post_data import math_preferences, split_heldout

    run = json.loads((stage_dir / "train_config.json").read_text())
    cfg = run["train"]
    assert run["data"] == "" and cfg["heldout_fraction"] > 0
    _, held = split_heldout(math_preferences(cfg["examples"], cfg["math_level"], cfg["seed"]),
                            cfg["heldout_fraction"], cfg["seed"])
    plan = next(json.loads(line) for line in (stage_dir / "metrics.jsonl").read_text().splitlines()
                if json.loads(line).get("event") == "plan")
    assert plan["heldout_pairs"] == len(held) and plan["dropped_too_long"] == 0
    return run, held, load(stage_dir / f"step-{cfg['steps']:08d}")


def _reward_heldout(stage_dir) -> dict[str, tuple[float, float]]:
    """{metric: (value, tolerance)}: the reward model's held-out accuracy, margin and
    Bradley-Terry loss, scored from the checkpoint's trunk and score head. Tolerance: the
    recorded numbers are rounded to 4 places (5e-5); the rows are scored as one right-padded
    batch under the run's autocast, as the program does (bf16 where the CPU has it), so 5e-4
    leaves room for another thread count, and the baseline's margin was 0.0066 away (measured)."""
    import torch.nn.functional as F

    from model.core.batches import encode_reply
    from model.core.precision import autocast
    from model.post.heads import RewardModel

    run, held, loaded = _heldout_pairs(stage_dir)
    model = RewardModel(loaded.model).eval()
    model.load_heads(load_file(loaded.checkpoint.path / "heads.safetensors"))
    rows = [encode_reply(loaded.tokenizer, list(p.prompt), reply).ids for p in held for reply in (p.chosen, p.rejected)]
    idx = torch.full((len(rows), max(map(len, rows))), loaded.tokenizer.eot_id)
    for i, r in enumerate(rows):
        idx[i, :len(r)] = torch.tensor(r)
    with torch.no_grad(), autocast(run["train"]["dtype"], torch.device("cpu")):
        scores = model(idx, torch.tensor([len(r) - 1 for r in rows]))
    chosen, rejected = scores[0::2], scores[1::2]
    return {"eval_accuracy": ((chosen > rejected).float().mean().item(), 5e-5),
            "eval_margin": ((chosen - rejected).mean().item(), 5e-4),
            "eval_loss": (-F.logsigmoid(chosen - rejected).mean().item(), 5e-4)}


def _dpo_heldout(stage_dir) -> dict[str, tuple[float, float]]:
    """{metric: (value, tolerance)}: DPO's held-out implicit rewards beta (log pi - log ref)
    with the final checkpoint as pi and the stage's starting model (the SFT checkpoint) as
    the reference, their accuracy and margin, and the loss with RPO's NLL term. Tolerance:
    4 recorded places (5e-5), and fp32 rows scored one at a time here, padded in a batch there
    (measured: within 4.3e-5 of the recorded numbers)."""
    import torch.nn.functional as F

    from model.checkpoint.load import load
    from model.core.batches import encode_reply

    run, held, policy = _heldout_pairs(stage_dir)
    cfg = run["train"]
    assert cfg["loss"] == "dpo" and cfg["dtype"] == "fp32"
    ref = load(run["init"])

    def reply_logps(model, prompt, reply):
        row = encode_reply(policy.tokenizer, list(prompt), reply)
        ids = torch.tensor(row.ids)
        with torch.no_grad():
            logits, _ = model(ids[None, :-1])
        return torch.log_softmax(logits[0].float(), -1).gather(-1, ids[1:, None])[:, 0][torch.tensor(row.trained[1:])]

    pi_c = [reply_logps(policy.model, p.prompt, p.chosen) for p in held]
    pi_r = torch.stack([reply_logps(policy.model, p.prompt, p.rejected).sum() for p in held])
    ref_c = torch.stack([reply_logps(ref.model, p.prompt, p.chosen).sum() for p in held])
    ref_r = torch.stack([reply_logps(ref.model, p.prompt, p.rejected).sum() for p in held])
    r_c = cfg["beta"] * (torch.stack([c.sum() for c in pi_c]) - ref_c)
    r_r = cfg["beta"] * (pi_r - ref_r)
    nll = -torch.cat(pi_c).mean()
    loss = -F.logsigmoid(r_c - r_r).mean() + cfg["rpo_alpha"] * nll
    return {"eval_reward_chosen": (r_c.mean().item(), 2e-4), "eval_reward_rejected": (r_r.mean().item(), 2e-4),
            "eval_margin": ((r_c - r_r).mean().item(), 2e-4), "eval_accuracy": ((r_c > r_r).float().mean().item(), 5e-5),
            "eval_logp_chosen": (torch.stack([c.sum() for c in pi_c]).mean().item(), 2e-3),
            "eval_nll_chosen": (nll.item(), 2e-4), "eval_loss": (loss.item(), 2e-4)}


def test_missing_parent_is_a_clear_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    h = env.use_home(tmp_path)
    result = _materialize(h, ("dpo_model",))
    err = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "materialize sft_model first" in err
    # a refusal is not retried (the retry policy is for crashes: a retry resumes exactly)
    assert not any(e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY for e in result.all_events)
    from assets.training.post_training import dpo_model

    assert dpo_model.op.retry_policy == dg.RetryPolicy(max_retries=2, delay=10)


def _run(tmp_path, stage: str, init, **train) -> dict:
    from model.post.config import STAGE_TYPES

    cfg = STAGE_TYPES[stage](**{"steps": 4, "batch_size": 2, "examples": 12, "checkpoint_every": 2,
                                "keep_checkpoints": 5, "eval_every": 100, "replay": 0.0, **train})
    import dataclasses

    out = tmp_path / stage
    return {"stage": stage, "train": dataclasses.asdict(cfg), "init": str(init), "out": str(out), "data": "",
            "reward_model": str(tmp_path / "reward"), "lineage": {}}


# GRPO is not here: a random tiny model earns no verifiable reward, so GRPO alone never moves
# its weights and any resume would "reproduce" them; its exact resume is tested with replay
# (test_replay_is_added_and_resumes_exactly), which moves the model.
@pytest.mark.parametrize("stage", ["sft", "reward", "dpo", "ppo"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, stage):
    """Delete the last checkpoint and run again: the run resumes at step 2, steps 3 and 4
    record exactly the numbers the uninterrupted run recorded (losses, accuracies, rewards,
    the evaluation at the end), and it ends on exactly its weights (and heads: the reward
    model's score, PPO's value). Exact, not close: CPU, fp32, one process, and every input
    of a step restored or rebuilt as it was (weights, heads, optimizer moments, the data
    order, the learning rate, DPO's frozen reference; RL seeds its rollouts from the step)."""
    from model.post.train import train

    base = tiny_checkpoint(tmp_path / "data", context=384)
    extra = {"dev_problems": 0, "max_new_tokens": 10} if stage == "ppo" else {}
    if stage == "ppo":
        train(_run(tmp_path, "reward", base, steps=1))
    if stage in ("reward", "dpo"):  # a learning rate that moves the model (the default warms up over 10 steps)
        extra |= {"lr": 1e-3, "warmup": 1}
    run = _run(tmp_path, stage, base, **extra)
    train(run)
    out = tmp_path / stage
    final = load_file(out / "step-00000004" / "model.safetensors")
    heads = out / "step-00000004" / "heads.safetensors"
    final_heads = load_file(heads) if heads.exists() else {}
    assert bool(final_heads) == (stage in ("reward", "ppo"))
    start = load_file(base / "model.safetensors")  # the run moved the model: resuming has something to get right
    assert any(not torch.equal(final[k], start[k]) for k in start), "the run did not change the weights"
    import shutil

    shutil.rmtree(out / "step-00000004")
    train(run)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    resume = next(i for i, r in enumerate(records) if r.get("event") == "resume")
    assert records[resume]["step"] == 2

    def steps(rows: list[dict]) -> dict[int, dict]:  # the numbers of each step, not when it ran
        return {r["step"]: {k: v for k, v in r.items() if k not in ("event", "time", "elapsed_s", "eta_s")}
                for r in rows if r.get("event") == "step"}

    straight, resumed = steps(records[:resume]), steps(records[resume:])
    assert sorted(straight) == [1, 2, 3, 4] and sorted(resumed) == [3, 4]
    for s in (3, 4):
        assert resumed[s] == straight[s], (s, {k: (straight[s].get(k), v) for k, v in resumed[s].items()
                                               if straight[s].get(k) != v})
    again = load_file(out / "step-00000004" / "model.safetensors")
    assert again.keys() == final.keys()
    for k in final:
        torch.testing.assert_close(again[k], final[k], rtol=0, atol=0)
    if final_heads:
        again_heads = load_file(heads)
        assert again_heads.keys() == final_heads.keys()
        for k in final_heads:
            torch.testing.assert_close(again_heads[k], final_heads[k], rtol=0, atol=0)


@pytest.mark.parametrize(("stage", "replay"), [("sft", 0.0), ("grpo", 0.0), ("grpo", 1.0)])
def test_stage_runs_under_two_gloo_processes(tmp_path, stage, replay):
    """DDP across two torchrun processes: every rank takes the same number of updates (a
    rank without a learning signal must not skip its backward, or the other would wait
    forever), and rank 0 checkpoints. With replay, the replayed LM loss (taken through the
    unwrapped GPT) joins the loss that went through DDP, and one backward reduces both."""
    import subprocess
    import sys

    base = base_with_shards(tmp_path)[0] if replay else tiny_checkpoint(tmp_path / "data", context=384)
    extra = {"dev_problems": 0, "max_new_tokens": 10, "group": 2} if stage == "grpo" else {}
    run = _run(tmp_path, stage, base, replay=replay, replay_batch_size=1, **extra)
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
           "model.post.train", "--config", str(config)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                       env={**__import__("os").environ, **env.TELEMETRY_OFF, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / stage / "metrics.jsonl").read_text().splitlines()]
    assert next(r for r in records if r.get("event") == "start")["world_size"] == 2
    assert (tmp_path / stage / "step-00000004" / "checksums.json").exists()
    if replay:  # the two ranks read disjoint windows: the global cursor moves 2 per update
        state = json.loads((tmp_path / stage / "step-00000004" / "state.json").read_text())
        assert state["replay"]["loader"]["cursor"] == 4 * 2 * 2 and records[-1]["replay_loss"] > 0


def test_zero_steps_copies_the_starting_model(tmp_path):
    """post.<stage>.steps = 0 skips a stage in effect: its checkpoint is its starting model."""
    from model.post.train import train

    base = tiny_checkpoint(tmp_path / "data", context=384)
    train(_run(tmp_path, "dpo", base, steps=0))
    copied = load_file(tmp_path / "dpo" / "step-00000000" / "model.safetensors")
    original = load_file(base / "model.safetensors")
    assert copied.keys() == original.keys()
    assert all(torch.equal(copied[k], original[k]) for k in original)


# --- replay of pretraining text (model/post/replay.py) ---

def _sft_run():
    from model.post.config import PostRun, SFTConfig

    return PostRun(stage="sft", train=SFTConfig(), init="", out="")


def test_replay_reads_only_the_train_split_of_the_base_models_shards(tmp_path):
    from types import SimpleNamespace

    from model.checkpoint.load import load
    from model.core.gpt import GPT
    from model.post.config import SFTConfig
    from model.post.replay import Replay, ReplayError

    base, _ = base_with_shards(tmp_path)
    loaded = load(base)
    d = SimpleNamespace(rank=0, world=1, device=torch.device("cpu"))
    replay = Replay(SFTConfig(replay=0.5, replay_batch_size=3), loaded, d, _sft_run())
    seen = set()
    for _ in range(40):  # several epochs of the train split (every other batch read here)
        weighted = replay.loss(loaded.model)
        x, _ = replay.loader.next_batch()
        seen |= set(x.flatten().tolist())
    assert seen <= {0, *TRAIN_IDS} and replay.loader.split == "train"
    m = replay.metrics()
    assert m["replay_tokens"] == 40 * 3 * 32 and replay.metrics() == {}  # cleared after each step
    assert weighted.item() == pytest.approx(0.5 * m["replay_loss"], rel=0.05)
    # no shards named (a checkpoint from elsewhere): a clear refusal, not a silent skip
    bare = SimpleNamespace(state={}, config=loaded.config)
    with pytest.raises(ReplayError, match=r"replay=0"):
        Replay(SFTConfig(replay=0.5), bare, d, _sft_run())
    assert isinstance(loaded.model, GPT)


@pytest.mark.parametrize("stage", ["sft", "grpo"])
def test_replay_is_added_and_resumes_exactly(tmp_path, stage):
    """replay > 0 changes the update (replay_loss in every step, other weights than without
    it), the loader's state is in the checkpoint, and a resumed run ends on exactly the
    weights of the uninterrupted one."""
    import shutil

    from model.post.train import train

    base, _ = base_with_shards(tmp_path)
    extra = {"dev_problems": 0, "max_new_tokens": 10, "group": 2, "iterations": 2} if stage == "grpo" else {}
    off = _run(tmp_path / "off", stage, base, **extra)
    train(off)
    run = _run(tmp_path, stage, base, replay=1.0, replay_batch_size=2, **extra)
    train(run)
    out = tmp_path / stage
    final = load_file(out / "step-00000004" / "model.safetensors")
    without = load_file(tmp_path / "off" / stage / "step-00000004" / "model.safetensors")
    assert any(not torch.equal(final[k], without[k]) for k in final)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    plan = next(r for r in records if r.get("event") == "plan")
    updates_per_step = extra.get("iterations", 1)
    assert plan["replay"] == 1.0 and plan["replay_split"] == "train" and plan["replay_shards"] == ["corpus"]
    assert plan["replay_tokens_planned"] == 4 * updates_per_step * 2 * 32 and "replay: 1.0 x LM loss" in plan["summary"]
    steps = [r for r in records if r.get("event") == "step"]
    assert all(r["replay_loss"] > 0 for r in steps)
    assert steps[-1]["replay_tokens"] == 4 * updates_per_step * 2 * 32
    state = json.loads((out / "step-00000002" / "state.json").read_text())
    assert state["replay"]["loader"]["cursor"] == 2 * updates_per_step * 2
    assert state["replay"]["loader"]["split"] == "train" and state["replay"]["tokens"] == 2 * updates_per_step * 64

    shutil.rmtree(out / "step-00000004")
    train(run)
    again = load_file(out / "step-00000004" / "model.safetensors")
    for k in final:
        torch.testing.assert_close(again[k], final[k], rtol=0, atol=0)
    assert json.loads((out / "step-00000004" / "state.json").read_text())["replay"]["tokens"] == 4 * updates_per_step * 64
