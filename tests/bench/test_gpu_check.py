"""bench/gpu_check.py on CPU: the script run on a lent GPU must work before the lease
starts, and FSDP2 over a process group of one must compute what the plain model computes
(the code path a single GPU exercises)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import gpu_check
from tests.support.pretrain_runs import losses_of, make_shards, write_train_config


def test_gpu_check_on_cpu_fsdp_of_one_matches_eager_and_home_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # a home's base-model config as its asset writes it, with paths under a root that moves
    home = tmp_path / "home"
    shards = make_shards(home / "data" / "token_shards")
    config = write_train_config(tmp_path, "base_model", shards, steps=20, eval_every=10, threads=1)
    moved = tmp_path / "moved"
    (home).rename(moved)
    out = tmp_path / "out"
    rc = gpu_check.main(["--preset", "tiny", "--batch", "2", "--seq", "32", "--steps", "6", "--variants",
                         "eager,fsdp", "--out", str(out), "--home-config", str(config), "--home-root", str(home),
                         "--home-data", str(moved)])
    assert rc == 0
    result = json.loads((out / "gpu_check.json").read_text())
    rows = {r["variant"]: r for r in result["variants"]}
    assert set(rows) == {"eager", "fsdp"}
    for r in rows.values():
        assert r["rc"] == 0 and r["tokens_per_s"] > 0 and 0 < r["mfu_datasheet"] and r["planned_gib"] > 0
    eager, fsdp = losses_of(out / "eager"), losses_of(out / "fsdp")
    assert sorted(fsdp) == list(range(1, 7))
    assert max(abs(eager[s] - fsdp[s]) for s in eager) < 1e-4
    # the FSDP run really ran under fully_shard (the program says which wrapper it used)
    starts = {n: next(json.loads(x) for x in (out / n / "metrics.jsonl").read_text().splitlines()
                  if json.loads(x)["event"] == "start") for n in rows}
    assert starts["fsdp"]["fsdp"] is True and starts["eager"]["fsdp"] is False
    home_run = result["home"]
    assert home_run["rc"] == 0 and home_run["steps"] == 20 and home_run["val_ppl"] > 0
    written = json.loads((out / "home.json").read_text())["train"]
    assert written["dtype"] == "auto" and all(Path(s).is_relative_to(moved) for s in written["shards"])
