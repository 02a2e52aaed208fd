"""Do the results hold across seeds? The whole post-training chain from fresh base models,
in parallel processes on one GPU (docs/post-training.md#the-whole-chain-over-three-seeds).

For each seed and math level: a fresh base model, then SFT -> reward -> DPO -> PPO -> GRPO,
each from the config its asset wrote and wired as the graph wires them, every checkpoint
scored as the evaluation report scores it. It runs the programs the assets launch, not
Dagster (a device image need not have it); `bench/bench_seeds.py` is the same through
`yunque run`. Settings are environment variables:

    HOME_COPY=DIR ROOT=/path/of/the/home [LEVELS="add2 mixed"] [SEEDS="0 1 2"] [UNTIL=grpo]
        [SFT_STEPS=900] [PROBLEMS=200] [GRPO_ALT='{"lr": 2e-4}'] [WORK=/tmp/d] python -m bench.seed_chains
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from bench.bench_seeds import figures, table
from model.launch.spec import rewrite_paths
from stages.asset_names import CHAIN as GRAPH

ROOT = os.environ.get("ROOT", "")
HERE = Path(os.environ.get("HOME_COPY", ".gpu/home")).resolve()
WORK = Path(os.environ.get("WORK", "/tmp/d"))
RES = Path(os.environ.get("OUT", "/tmp/o"))
SMOKE = bool(os.environ.get("SMOKE"))
PROBLEMS = 2 if SMOKE else int(os.environ.get("PROBLEMS", "200"))
# stage -> asset, and stage -> the stage it starts from, as the graph wires them
ASSET = {"base": "base_model", **{stage: asset for asset, (stage, _) in GRAPH.items()}}
CHAIN = {stage: parent.removesuffix("_model") for stage, parent in GRAPH.values()}
_lock = threading.Lock()


def load(stage: str) -> dict:
    if not ROOT:
        raise SystemExit("set ROOT to the home path that the configs in HOME_COPY name")
    return rewrite_paths(json.loads((HERE / "configs" / f"{stage}.json").read_text()), ROOT, str(HERE))


def run(args: list[str], log: Path) -> int:
    with open(log, "w") as f:
        return subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT, check=False).returncode


def last_checkpoint(out: Path) -> str:
    steps = sorted(p for p in out.glob("step-*") if (p / "checksums.json").exists())
    return str(steps[-1]) if steps else ""


def stage_config(stage: str, seed: int, level: str, out: Path, done: dict[str, str],
                 extra: dict | None = None) -> dict:
    """`stage`'s asset config moved into HOME_COPY, started from its parent's checkpoint in
    `done`, with the seed, the level and `extra` train overrides set."""
    cfg = load(stage)
    t = cfg["train"]
    t.update(seed=seed, **(extra or {}))
    if stage == "base":
        t["out"] = str(out)
        if SMOKE:
            t.update(steps=4, eval_every=2, checkpoint_every=2, dtype="fp32", compile=False, warmup=1)
        return cfg
    cfg.update(init=done[CHAIN[stage]], out=str(out), reward_model=done["reward"] if stage == "ppo" else "")
    t["math_level"] = level
    if stage == "sft" and os.environ.get("SFT_STEPS"):
        t["steps"] = int(os.environ["SFT_STEPS"])
    if SMOKE:
        t.update(steps=2, eval_every=1, checkpoint_every=1, warmup=1, dtype="fp32", examples=32)
    return cfg


def train(stage: str, seed: int, level: str, out: Path, done: dict[str, str], extra: dict | None = None) -> str:
    path = out.with_suffix(".json")
    path.write_text(json.dumps(stage_config(stage, seed, level, out, done, extra)))
    program = "model.pretrain.train" if stage == "base" else "model.post.train"
    rc = run(["-m", program, "--config", str(path)], out.with_suffix(".log"))
    return last_checkpoint(out) if rc == 0 else ""


def evaluate(ckpt: str, level: str, out: Path) -> dict:
    if not ckpt:
        return {"failed": True}
    code = ("import json,sys; from model.infer.evaluate import evaluate_checkpoint; from model.core.config import EvalConfig;"
            "r=evaluate_checkpoint(sys.argv[1], EvalConfig(math_set=sys.argv[3], math_problems=int(sys.argv[4])),"
            " shards=sys.argv[5:]); json.dump({k:r.get(k) for k in ('val_ppl','math_accuracy','math_rephrased')},"
            " open(sys.argv[2],'w'))")
    shards = sorted(str(p) for p in (HERE / "data" / "token_shards").iterdir())
    res = out.with_suffix(".eval.json")
    rc = run(["-c", code, ckpt, str(res), f"es_{level}", str(PROBLEMS), *shards], out.with_suffix(".eval.log"))
    return json.loads(res.read_text()) if rc == 0 else {"failed": True}


def chain(seed: int, level: str, until: str, pool: ThreadPoolExecutor) -> list[Future]:
    """Train the chain for (seed, level) in order; each checkpoint's evaluation runs in
    `pool` while the next stage trains. The base model is shared by the levels of a seed."""
    done: dict[str, str] = {}
    rows: list[Future] = []
    alt = json.loads(os.environ.get("GRPO_ALT", "{}"))
    for stage in ("base", *CHAIN):
        if stage == "grpo" and alt and done.get("ppo"):  # the alternative GRPO from the same PPO model
            out = WORK / f"{level}-{seed}-grpo_alt"
            rows.append(pool.submit(_alt, seed, level, out, dict(done), alt))
        tag = f"base-{seed}" if stage == "base" else f"{level}-{seed}-{stage}"
        out = WORK / tag
        t0 = time.time()
        if stage == "base":  # trained once per seed; the other levels wait for it
            with _base_lock(seed):
                if seed not in _bases:
                    _bases[seed] = train(stage, seed, level, out, done)
                done[stage] = _bases[seed]
        else:
            done[stage] = train(stage, seed, level, out, done)
        seconds = round(time.time() - t0, 1)
        meta = {"level": level, "seed": seed, "stage": ASSET[stage], "seconds": seconds, "checkpoint": done[stage]}
        rows.append(pool.submit(lambda m=meta, c=done[stage], o=out: _report(m | evaluate(c, level, o))))
        if not done[stage] or stage == until:
            break
    return rows


def _alt(seed: int, level: str, out: Path, done: dict[str, str], alt: dict) -> dict:
    t0 = time.time()
    ckpt = train("grpo", seed, level, out, done, alt)
    meta = {"level": level, "seed": seed, "stage": "grpo_model_alt", "overrides": alt,
            "seconds": round(time.time() - t0, 1), "checkpoint": ckpt}
    return _report(meta | evaluate(ckpt, level, out))


def _report(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    with _lock, open(RES / "rows.jsonl", "a") as f:  # kept even if the run is cut off
        f.write(json.dumps(row) + "\n")
    return row


_base_locks: dict[int, threading.Lock] = {}
_bases: dict[int, str] = {}  # seed -> its base checkpoint ("" when its training failed)


def _base_lock(seed: int) -> threading.Lock:
    with _lock:
        return _base_locks.setdefault(seed, threading.Lock())


def summary(rows: list[dict]) -> str:
    """One `bench_seeds` table per level (the same figures and targets as through Dagster)."""
    text = []
    for level in dict.fromkeys(r["level"] for r in rows):
        per_seed = {}
        for seed in sorted({r["seed"] for r in rows if r["level"] == level}):
            stages = [r for r in rows if r["level"] == level and r["seed"] == seed and not r.get("failed")]
            got = {r["stage"] for r in stages}
            if "base_model" in got:
                per_seed[seed] = figures({"table": stages + [{"stage": a} for a in ASSET.values() if a not in got]})
        text.append(f"### level {level}, {PROBLEMS} problems per set\n\n{table(per_seed)}")
    return "\n".join(text)


def main() -> int:
    levels = os.environ.get("LEVELS", "add2").split()
    seeds = [int(s) for s in os.environ.get("SEEDS", "0 1 2").split()]
    until = os.environ.get("UNTIL", "grpo")
    if WORK.exists() and any(WORK.iterdir()):  # a stage would resume from another run's checkpoints
        raise SystemExit(f"WORK={WORK} is not empty: give a new folder")
    WORK.mkdir(parents=True, exist_ok=True)
    RES.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with ThreadPoolExecutor(len(levels) * len(seeds)) as chains, ThreadPoolExecutor(12) as evals:
        futures = [chains.submit(chain, s, lv, until, evals) for s in seeds for lv in levels]
        rows = []
        for f in futures:  # a chain that raised loses its own rows, not the others'
            try:
                rows += [r.result() for r in f.result()]
            except Exception as e:  # noqa: BLE001 - reported, and the rest is still written
                print(f"a chain failed: {e!r}", file=sys.stderr, flush=True)
    (RES / "chains.json").write_text(json.dumps(rows, indent=1))
    text = summary(rows)
    (RES / "chains.md").write_text(text)
    with tarfile.open(RES / "curves.tar.gz", "w:gz") as tar:
        for m in sorted(WORK.glob("*/metrics.jsonl")):
            tar.add(m, arcname=f"{m.parent.name}.jsonl")
    with open(RES / "grpo_curves.jsonl", "w") as f:
        f.writelines(json.dumps(p) + "\n" for p in grpo_curves(RES / "curves.tar.gz"))
    print(text + f"\ndone in {time.time() - t0:.0f} s", flush=True)
    return 0


CURVE_KEYS = ("step", "accuracy", "groups_with_signal", "kl", "eval_dev_accuracy")


def grpo_curves(tar_path: Path) -> list[dict]:
    """GRPO's per-step records of every chain in a run's curves.tar.gz, the fields the docs
    cite ("chain" is e.g. add2-0-grpo or add2-0-grpo_alt; the baseline is step 0)."""
    out = []
    with tarfile.open(tar_path) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if "-grpo" not in m.name:
                continue
            for line in tar.extractfile(m).read().splitlines():
                e = json.loads(line)
                if e.get("event") in ("baseline", "step"):
                    out.append({"chain": m.name.removesuffix(".jsonl"), **{k: e[k] for k in CURVE_KEYS if k in e}})
    return out


def plot(runs: list[Path], png: Path) -> None:
    """The figure behind docs/post-training.md's three-seed section, from each run's rows
    (PREFIX.jsonl) and GRPO curves (PREFIX_grpo.jsonl): GRPO's dev accuracy per evaluation
    (training wordings) for each add2 chain, and each chain's held-out-wording accuracy
    stage by stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    stages = ["base_model", "sft_model", "dpo_model", "ppo_model", "grpo_model", "grpo_model_alt"]
    for n, prefix in enumerate(runs, 1):
        points = [json.loads(x) for x in Path(f"{prefix}_grpo.jsonl").read_text().splitlines()]
        for chain in sorted({p["chain"] for p in points if p["chain"].startswith("add2-")}):
            pts = [(p["step"], p["eval_dev_accuracy"]) for p in points if p["chain"] == chain and "eval_dev_accuracy" in p]
            alt = chain.endswith("alt")
            left.plot(*zip(*pts), ls="--" if alt else "-", marker=".",
                      label=f"run {n} seed {chain.split('-')[1]}{' (lr 2e-4, 150 steps)' if alt else ''}")
        rows = [json.loads(x) for x in Path(f"{prefix}.jsonl").read_text().splitlines()]
        for seed in sorted({r["seed"] for r in rows}):
            got = {r["stage"]: r.get("math_rephrased") for r in rows if r["level"] == "add2" and r["seed"] == seed}
            xs = [i for i, s in enumerate(stages) if got.get(s) is not None]
            right.plot(xs, [got[stages[i]] for i in xs], marker="o", label=f"run {n} seed {seed}")
    left.set(xlabel="GRPO step", ylabel="accuracy on 64 dev problems (training wordings)",
             title="GRPO: no room on the wordings it trains on")
    right.set_xticks(range(len(stages)), [s.removesuffix("_model").replace("_model_alt", " alt") for s in stages])
    right.axhline(0.5, color="grey", lw=0.8)
    right.set(ylabel="held-out wordings, 200 problems", title="Held-out wordings, stage by stage (add2)")
    for ax in (left, right):
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    if sys.argv[1:2] == ["plot"]:  # python -m bench.seed_chains plot PREFIX... PNG
        plot([Path(p) for p in sys.argv[2:-1]], Path(sys.argv[-1]))
        raise SystemExit(0)
    raise SystemExit(main())
