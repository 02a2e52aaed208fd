"""Continued pretraining: new token shards continue the finished base run from its final
checkpoint (weights, step) on a mixture of new and replayed shards, resumably; anything
else that changed trains from scratch and says why. Real training on CPU (tiny model,
`python -m model.pretrain.train` as torchrun starts it) against a real store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.checkpoint.files import all_checkpoints, latest
from stages.asset_names import BASE_MODEL, TOKEN_SHARDS
from stages.config import preset
from stages.store.outputs import DataStore
from stages.training.pretrain import prepare
from stages.training.runs import RunSpec
from tests.support import REPO
from tests.support.token_stores import SMALL, add_token_shard, set_tokenizer


def train(spec: RunSpec) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "model.pretrain.train", "--config", str(spec.config_path)], check=False,
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]


def records(root: Path, event: str) -> list[dict]:
    return [r for r in map(json.loads, (root / "metrics.jsonl").read_text().splitlines()) if r["event"] == event]


def losses(root: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(root, "step")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, RunSpec, dict[int, float]]:
    """A home whose base run trained to its last step on shard `a`."""
    home = tmp_path_factory.mktemp("continue") / "home"
    store = DataStore(home)
    set_tokenizer(store)
    add_token_shard(store, "a", seed=0)
    spec = prepare(store, ["a"], preset("tiny", SMALL))
    assert spec.lineage["start"] == "fresh: no previous run" and spec.continued_from is None
    train(spec)
    return home, spec, losses(spec.dir)


@pytest.fixture()
def home(finished, tmp_path) -> Path:
    """A copy of the finished home, for a test to change."""
    return Path(shutil.copytree(finished[0], tmp_path / "home"))


def test_a_new_shard_continues_the_finished_run(finished, home):
    _, first, first_losses = finished
    store = DataStore(home)
    assert prepare(store, ["a"], preset("tiny", SMALL)).key == first.key  # nothing new: the same run
    add_token_shard(store, "b", seed=1)
    spec = prepare(store, ["a", "b"], preset("tiny", SMALL))
    archived = home / "data" / BASE_MODEL / "previous" / first.key
    cont = spec.lineage["continued_from"]
    assert cont["run_key"] == first.key and cont["step"] == 24
    assert cont["checkpoint"] == str(archived / "step-00000024")  # where it lives after the archive
    assert cont["weights_sha256"] == json.loads((archived / "step-00000024" / "checksums.json").read_text())[
        "model.safetensors"]
    assert spec.lineage["start"] == "continued: new or changed shards ['b']"
    assert (spec.lineage["new_shards"], spec.lineage["old_shards"], spec.lineage["replay_fraction"]) == (
        ["b"], ["a"], 0.25)
    assert sorted(spec.lineage["token_shards"]) == ["a", "b"] and spec.lineage["steps"] == [24, 30]
    assert [(g["name"], g["shards"], g["weight"]) for g in spec.lineage["sources"]] == [
        ("new", ["b"], 0.75), ("replay", ["a"], 0.25)]
    assert all(g["train_tokens"] > 0 for g in spec.lineage["sources"])
    t = spec.config["train"]
    assert (t["init_from"], t["start_step"], t["steps"]) == (cont["checkpoint"], 24, 30)
    assert t["replay_shards"] == [str(store.dir(TOKEN_SHARDS, "a"))] and len(t["shards"]) == 2  # validation: all

    train(spec)
    after = losses(spec.dir)
    assert sorted(after) == list(range(25, 31))  # the global step continues past the first run's
    assert latest(spec.dir).step == 30 > first.steps
    # the first step already has the trained model's loss, not a random one's
    assert after[25] < (first_losses[1] + first_losses[24]) / 2
    assert [r["checkpoint"] for r in records(spec.dir, "continue")] == [cont["checkpoint"]]
    state = latest(spec.dir).state()
    assert state["tokens_per_source"] == {"new": 18 * 32, "replay": 6 * 32}  # 6 steps of 4 windows, 3:1
    assert state["tokens_seen"] == 30 * 4 * 32  # the model's whole life
    # re-materializing changes nothing
    assert prepare(store, ["a", "b"], preset("tiny", SMALL)).key == spec.key

    # interrupted after step 28: it resumes from its own checkpoint, not the first run's, exactly
    shutil.rmtree(spec.dir / "step-00000030")
    train(spec)
    assert [r["step"] for r in records(spec.dir, "resume")] == [28]
    assert losses(spec.dir)[30] == after[30] and losses(spec.dir)[29] == after[29]

    from assets.training.pretrain import continuation

    md = continuation(spec, latest(spec.dir).state())
    assert md["step_range"] == "24..30" and md["continued_from"].value["run_key"] == first.key
    rows = [r.data for r in md["mixture"].records]
    assert [(r["source"], r["shards"], r["weight"], r["tokens_drawn"]) for r in rows] == [
        ("new", "b", 0.75, 576), ("replay", "a", 0.25, 192)]

    # a third shard continues the continuation; the first run's checkpoint is still there
    add_token_shard(store, "c", seed=2)
    third = prepare(store, ["a", "b", "c"], preset("tiny", SMALL))
    assert third.continued_from["run_key"] == spec.key and third.continued_from["step"] == 30
    assert (third.lineage["new_shards"], third.lineage["old_shards"]) == (["c"], ["a", "b"])
    assert third.config["train"]["steps"] == 36
    assert latest(cont["checkpoint"]).step == 24 and latest(third.continued_from["checkpoint"]).step == 30


@pytest.mark.parametrize("change, reason", [
    ({"model.n_layers": 3}, "fresh: model config changed (model.n_layers)"),
    ({"train.lr": 1e-3}, "fresh: recipe changed (train.lr)"),
    ({"train.continue_from_previous": False}, "fresh: train.continue_from_previous is off"),
    ("tokenizer", "fresh: tokenizer changed"),
    ("removed", "fresh: shards removed since the previous run ['a']"),
    ("incomplete", "fresh: the previous run is incomplete (step 20 of 24)"),
])
def test_anything_but_new_shards_trains_from_scratch(finished, home, change, reason):
    first = finished[1]
    store = DataStore(home)
    shards, overrides = ["a", "b"], dict(SMALL)
    add_token_shard(store, "b", seed=1)
    if change == "tokenizer":
        set_tokenizer(store, "tok-2")
        for seed, s in enumerate(shards):
            add_token_shard(store, s, seed=seed, tok_hash="tok-2")
    elif change == "removed":
        shards = ["b"]
    elif change == "incomplete":
        shutil.rmtree(home / "data" / BASE_MODEL / "step-00000024")
    else:
        overrides |= change
    spec = prepare(store, shards, preset("tiny", overrides))
    assert spec.lineage["start"] == reason and spec.continued_from is None
    assert spec.lineage["old_shards"] == [] and spec.lineage["new_shards"] == shards
    t = spec.config["train"]
    assert (t["init_from"], t["start_step"], t["steps"], t["replay_shards"]) == ("", 0, 24, [])
    assert not all_checkpoints(spec.dir) and (spec.dir / "previous" / first.key).is_dir()


def test_other_continuation_settings_restart_from_the_same_checkpoint(finished, home):
    first = finished[1]
    store = DataStore(home)
    add_token_shard(store, "b", seed=1)
    spec = prepare(store, ["a", "b"], preset("tiny", SMALL))
    again = prepare(store, ["a", "b"], preset("tiny", {**SMALL, "train.replay_fraction": 0.5}))
    assert again.key != spec.key and again.continued_from == spec.continued_from  # the first run's step 24
    assert again.lineage["sources"][1]["weight"] == 0.5 and again.config["train"]["steps"] == 30
    assert (home / "data" / BASE_MODEL / "previous" / spec.key / "run.json").exists()
    longer = prepare(store, ["a", "b"], preset("tiny", {**SMALL, "train.replay_fraction": 0.5,
                                                        "train.continue_steps": 10}))
    assert longer.config["train"]["steps"] == 34 and longer.continued_from["run_key"] == first.key
    half = prepare(store, ["a", "b"], preset("tiny", {**SMALL, "train.continue_steps": 0}))  # 0: half of 24
    assert half.config["train"]["steps"] == 36 and half.continued_from["run_key"] == first.key
    off = prepare(store, ["a", "b"], preset("tiny", {**SMALL, "train.continue_from_previous": False}))
    assert off.continued_from is None and off.lineage["start"] == "fresh: train.continue_from_previous is off"
    assert off.config["train"]["steps"] == 24


def test_two_gloo_processes_continue_as_one(finished, home, tmp_path):
    """The mixture splits each global batch across DDP ranks: a continued run on two
    processes computes what one process with their global batch computes."""
    store = DataStore(home)
    add_token_shard(store, "b", seed=1)
    spec = prepare(store, ["a", "b"], preset("tiny", SMALL))
    train(spec)
    two = json.loads(spec.config_path.read_text())
    two["train"] |= {"batch_size": 2, "out": str(tmp_path / "two")}
    config = tmp_path / "two.json"
    config.write_text(json.dumps(two))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "model.pretrain.train", "--config", str(config)], check=False, capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    one, both = losses(spec.dir), losses(tmp_path / "two")
    assert sorted(both) == list(range(25, 31))
    assert max(abs(one[s] - both[s]) for s in one) < 1e-4
    assert latest(tmp_path / "two").state()["tokens_per_source"] == latest(spec.dir).state()["tokens_per_source"]


def test_a_shard_that_lands_reaches_the_model_through_the_graph(tmp_path):
    """Through Dagster, as `yunque run` does it: the corpus trains base_model; a new shard
    lands; the next run encodes it with the same tokenizer and base_model continues the
    finished run on it (a real torchrun launch each time)."""
    from tests.support.factory import SMALL_TRAIN, add_shard, write_two_shards
    from yunque import env

    saved = {k: os.environ.get(k) for k in ("YUNQUE_HOME", "DAGSTER_HOME")}
    try:
        home = env.use_home(tmp_path / "home")
        write_two_shards(tmp_path / "corpus")
        from orchestration.runner import run_graph

        # continue_steps left at 0: half of the 4 steps
        overrides = json.dumps({"tokenizer.vocab_size": 512, "tokenizer.val_fraction": 0.3, **SMALL_TRAIN})

        def base_model() -> dict:
            summary = run_graph(str(tmp_path / "corpus"), select="+key:base_model", overrides=overrides)
            assert summary.ok, [r.error for r in summary.runs if not r.ok]
            return next(r.assets["base_model"] for r in summary.runs if "base_model" in r.assets)

        first = base_model()
        assert first["step"] == 4 and first["start"] == "fresh: no previous run"
        add_shard(tmp_path / "corpus", "nuevo", seed=7)
        second = base_model()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert second["cached"] is False and second["step"] == 6 and second["step_range"] == "4..6"
    assert second["continued_from"]["run_key"] == first["run_key"] and second["continued_from"]["step"] == 4
    lineage = second["lineage"]
    assert (lineage["new_shards"], lineage["old_shards"]) == (["nuevo"], ["foro", "manuales"])
    assert lineage["token_shards"].keys() == {"foro", "manuales", "nuevo"}
    assert lineage["token_shards"]["foro"] == first["lineage"]["token_shards"]["foro"]  # the same versions
    assert Path(second["continued_from"]["checkpoint"]).is_dir()
    assert str(home) in second["continued_from"]["checkpoint"] and "previous" in second["continued_from"]["checkpoint"]
