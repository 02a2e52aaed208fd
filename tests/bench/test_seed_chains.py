"""bench/seed_chains.py wires each stage as the graph does and scores the targets as
bench_seeds does (the training itself is the programs' own tests; a GPU runs the whole)."""

from __future__ import annotations

import json

from bench import seed_chains
from stages.asset_names import CHAIN as GRAPH

ROOT = "/old/home/.yunque"


def _home(tmp_path):
    configs = tmp_path / "copy" / "configs"
    configs.mkdir(parents=True)
    for stage in seed_chains.ASSET:
        cfg = {"stage": stage, "train": {"seed": 0, "steps": 10, "math_level": "add2"},
               "init": f"{ROOT}/data/x/step-1", "out": f"{ROOT}/data/{stage}", "reward_model": "",
               "replay_shards": [f"{ROOT}/data/token_shards/a"], "mixture": {"chitchat": f"{ROOT}/data/m.jsonl"}}
        (configs / f"{stage}.json").write_text(json.dumps(cfg))
    return tmp_path / "copy"


def test_every_stage_starts_from_its_graph_parent_with_paths_moved(tmp_path, monkeypatch):
    here = _home(tmp_path)
    monkeypatch.setattr(seed_chains, "ROOT", ROOT)
    monkeypatch.setattr(seed_chains, "HERE", here)
    monkeypatch.setattr(seed_chains, "SMOKE", False)
    monkeypatch.delenv("SFT_STEPS", raising=False)
    done = {stage: f"/w/{stage}/step-9" for stage in seed_chains.ASSET}
    for asset, (stage, parent) in GRAPH.items():
        cfg = seed_chains.stage_config(stage, 2, "mixed", tmp_path / stage, done, {"lr": 1e-4} if stage == "grpo" else None)
        assert cfg["init"] == done[parent.removesuffix("_model")], asset
        assert cfg["reward_model"] == (done["reward"] if stage == "ppo" else "")
        assert cfg["train"]["seed"] == 2 and cfg["train"]["math_level"] == "mixed"
        assert cfg["replay_shards"] == [f"{here}/data/token_shards/a"]
        assert cfg["mixture"]["chitchat"] == f"{here}/data/m.jsonl"
        assert ("lr" in cfg["train"]) == (stage == "grpo")
    base = seed_chains.stage_config("base", 1, "add2", tmp_path / "base-1", {})
    assert base["train"]["seed"] == 1 and base["train"]["out"] == str(tmp_path / "base-1")


def test_chain_order_base_once_per_seed_until_alt_and_failure(tmp_path, monkeypatch):
    """chain() with the programs replaced by a recorder: the order of stages, what each
    starts from, one base model per seed shared by the levels, UNTIL, GRPO_ALT, and a
    failed stage ending its chain."""
    from concurrent.futures import ThreadPoolExecutor

    calls = []

    def train(stage, seed, level, out, done, extra=None):
        calls.append((stage, seed, level, dict(done), extra))
        return "" if (stage, level) == ("dpo", "mixed") else f"{out}/step-1"

    monkeypatch.setattr(seed_chains, "train", train)
    monkeypatch.setattr(seed_chains, "evaluate", lambda ckpt, level, out: {"val_ppl": 1.0} if ckpt else {"failed": True})
    monkeypatch.setattr(seed_chains, "RES", tmp_path)
    work = tmp_path / "w"
    monkeypatch.setattr(seed_chains, "WORK", work)
    monkeypatch.setattr(seed_chains, "_bases", {})
    monkeypatch.setenv("GRPO_ALT", '{"lr": 0.1}')
    with ThreadPoolExecutor(4) as pool:
        add2 = [f.result() for f in seed_chains.chain(0, "add2", "grpo", pool)]
        mixed = [f.result() for f in seed_chains.chain(0, "mixed", "grpo", pool)]
        short = [f.result() for f in seed_chains.chain(1, "add2", "sft", pool)]
    assert [r["stage"] for r in add2] == ["base_model", "sft_model", "reward_model", "dpo_model", "ppo_model",
                                          "grpo_model_alt", "grpo_model"]
    assert [c[0] for c in calls if c[1] == 0 and c[0] == "base"] == ["base"]  # one base for both levels
    started = {(c[0] if c[4] is None else "alt", c[2], c[1]): c[3] for c in calls}
    assert started[("sft", "add2", 0)]["base"] == started[("sft", "mixed", 0)]["base"] == f"{work}/base-0/step-1"
    assert started[("dpo", "add2", 0)]["sft"] == f"{work}/add2-0-sft/step-1"
    assert started[("ppo", "add2", 0)]["reward"] == f"{work}/add2-0-reward/step-1"
    assert started[("grpo", "add2", 0)]["ppo"] == started[("alt", "add2", 0)]["ppo"] == f"{work}/add2-0-ppo/step-1"
    assert [c[4] for c in calls if c[4] is not None] == [{"lr": 0.1}]
    assert [r["stage"] for r in mixed][-1] == "dpo_model" and mixed[-1]["failed"]  # stops at the failure
    assert [r["stage"] for r in short] == ["base_model", "sft_model"]  # UNTIL=sft
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == len(add2) + len(mixed) + len(short)


def test_summary_scores_the_targets_per_level(monkeypatch):
    def row(level, seed, stage, ppl, math, reph):
        return {"level": level, "seed": seed, "stage": stage, "val_ppl": ppl, "math_accuracy": math,
                "math_rephrased": reph}

    rows = [row("add2", 0, "base_model", 60.0, 0.0, 0.0), row("add2", 0, "sft_model", 66.0, 0.9, 0.55),
            row("add2", 0, "grpo_model", 66.0, 0.95, 0.61), row("add2", 1, "base_model", 60.0, 0.0, 0.0),
            row("add2", 1, "sft_model", 66.0, 0.9, 0.45), row("add2", 1, "grpo_model", 66.0, 0.9, 0.47),
            row("mixed", 0, "base_model", 60.0, 0.0, 0.0), {"level": "mixed", "seed": 0, "stage": "sft_model", "failed": True}]
    text = seed_chains.summary(rows)
    add2, mixed = text.split("### level mixed")
    lines = [x for x in add2.splitlines() if x.startswith(("| 0 |", "| 1 |"))]
    assert lines[0].endswith("| yes | yes |") and lines[1].endswith("| no | no |")
    assert "1/2 | 1/2 |" in add2
    assert "| 0 | 60 |" in mixed and mixed.rstrip().endswith("0/1 | 0/1 |")
