"""bench/seed_chains.py wires each stage as the graph does and scores the targets as
bench_seeds does (the training itself is the programs' own tests; a GPU runs the whole)."""

from __future__ import annotations

import json

from bench import seed_chains
from stages.post_train import CHAIN as GRAPH

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
    assert set(seed_chains.CHAIN) == {stage for stage, _ in GRAPH.values()}
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
