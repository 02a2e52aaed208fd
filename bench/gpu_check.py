"""The GPU path on one device, in one short script: a preset (GPT-2 small's shape by
default) trained in bf16 by the training program itself, as the base_model asset launches
it, in four variants (eager, torch.compile, compile with activation checkpointing, FSDP2
over one device): tokens/s and MFU, peak memory against the preflight plan, wall time.
With --home-config, a home's base-model run trained on the GPU with its own config.

    python -m bench.gpu_check [--preset gpt2_125m] [--batch 32] [--seq 1024] [--steps 30]
        [--variants eager,compile,checkpointing,fsdp] [--out DIR]
        [--home-config FILE --home-root ROOT --home-data DIR [--home-steps N]]

Without a GPU it runs on CPU (use --preset tiny and small sizes): that is how it is tested.
docs/benchmarks.md#the-gpu-path-on-one-h200-gpu_check-2026-12-04.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from model.core import flops
from model.core.config import preset
from model.launch.spec import rewrite_paths
from pipelines.tokens.token_format import FORMAT, HEADER, SplitWriter, token_dtype

VARIANTS = {
    "eager": {},
    "compile": {"compile": True},
    "checkpointing": {"compile": True, "activation_checkpointing": True},
    "fsdp": {"fsdp": True},
}
GIB = 2**30


def random_shard(root: Path, vocab: int, train_tokens: int, val_tokens: int, seed: int = 0) -> str:
    """One token shard of uniformly random tokens (documents of 4,096) in the pipeline's format."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab)
    splits = {}
    for split, n in (("train", train_tokens), ("val", val_tokens)):
        with SplitWriter(root, split, dtype, eot_id=0) as w:
            docs = [rng.integers(1, vocab, size=4096, dtype=np.int64) for _ in range(max(1, n // 4096))]
            w.add(docs, sum(len(d) for d in docs) * 4)
            splits[split] = w.close()
    (root / HEADER).write_text(json.dumps({"format": FORMAT, "dtype": dtype.str, "vocab_size": vocab, "eot_id": 0,
                                           "tokenizer_hash": "random", "shard": root.name, "splits": splits}))
    return str(root)


def run_program(config: dict, out: Path, name: str) -> dict:
    """Run `python -m model.pretrain.train` on `config`; its plan, estimate and final records, and wall time."""
    run_dir = out / name
    config["train"]["out"] = str(run_dir)
    path = out / f"{name}.json"
    path.write_text(json.dumps(config))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "model.pretrain.train", "--config", str(path)], capture_output=True, text=True,
                       check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.perf_counter() - t0
    (out / f"{name}.log").write_text(p.stdout + p.stderr)
    records = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").exists() else []:
        r = json.loads(line)
        records[r.get("event")] = r  # the last of each kind
    if p.returncode != 0:
        print(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}", flush=True)
    return {"rc": p.returncode, "wall_s": wall, **records}


def variant_row(name: str, res: dict, tokens_per_step: int, flops_per_token: float, matmul_peak: float) -> dict:
    est, done, plan = res.get("estimate", {}), res.get("done", {}), res.get("plan", {})
    tps = est.get("tokens_per_s")
    return {"variant": name, "rc": res["rc"], "tokens_per_s": tps, "ms_per_step": 1e3 * est["seconds_per_step"]
            if est else None, "mfu_datasheet": est.get("mfu"), "peak_source": est.get("peak_source"),
            "mfu_measured_matmul": tps * flops_per_token / matmul_peak if tps else None,
            "peak_memory_gib": done.get("peak_memory_bytes", 0) / GIB or None,
            "planned_gib": plan.get("total_bytes", 0) / GIB or None,
            "loss": done.get("loss"), "wall_s": round(res["wall_s"], 1), "tokens_per_step": tokens_per_step}


def home_run(args: argparse.Namespace, out: Path) -> dict:
    """The home's base-model config, paths moved to where the home's data is here."""
    config = rewrite_paths(json.loads(Path(args.home_config).read_text()), args.home_root, args.home_data)
    tc = config["train"]
    tc.update(dtype="auto", threads=0, checkpoint_mirror="", **({"steps": args.home_steps} if args.home_steps else {}))
    tc["warmup"] = min(tc["warmup"], tc["steps"] // 10)
    res = run_program(config, out, "home")
    done = res.get("done", {})
    return {"rc": res["rc"], "steps": done.get("step"), "val_loss": done.get("val_loss"), "val_ppl": done.get("val_ppl"),
            "tokens_per_s": done.get("tokens_per_s"), "mfu": done.get("mfu"), "wall_s": round(res["wall_s"], 1),
            "early_stop": res.get("early_stop")}


def _fmt(v) -> str:
    return "-" if v is None else f"{v:,.3g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gpt2_125m")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30, help="steps per variant; the first is not timed")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/work/gpu_check"))
    p.add_argument("--home-config", help="a home's data/base_model/train_config.json")
    p.add_argument("--home-root", help="the home path inside that config")
    p.add_argument("--home-data", help="where that home is here")
    p.add_argument("--home-steps", type=int, default=0, help="override the config's steps (0: keep)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu",
           "capability": torch.cuda.get_device_capability() if cuda else None}
    print(json.dumps(env), flush=True)
    mcfg = preset(args.preset)
    matmul = flops.matmul_peak(torch.bfloat16, n=8192 if cuda else 512, reps=20 if cuda else 3, device=str(device))
    fpt = flops.flops_per_token(mcfg, args.seq)
    print(f"{args.preset}: {mcfg.num_params() / 1e6:.1f}M parameters, {fpt / 1e9:.3f} GFLOP per token; "
          f"bf16 matmul measured at {matmul / 1e12:.1f} TFLOP/s", flush=True)
    tokens_per_step = args.batch * args.seq
    shard = random_shard(out / "shards" / "random", mcfg.vocab_size, tokens_per_step * (args.steps + 2),
                         args.batch * (args.seq + 1) * 2)
    train = {"shards": [shard], "steps": args.steps, "batch_size": args.batch, "seq_len": args.seq, "dtype": "auto",
             "warmup": 2, "eval_every": args.steps, "eval_batches": 2, "checkpoint_every": args.steps + 1,
             "keep_checkpoints": 1, "warmup_probe_steps": args.steps - 2}
    rows = []
    for name in args.variants.split(","):
        config = {"train": {**train, **VARIANTS[name]}, "model": dataclasses.asdict(mcfg)}
        rows.append(variant_row(name, run_program(config, out, name), tokens_per_step, fpt, matmul))
        print(json.dumps(rows[-1]), flush=True)
    result = {"env": env, "preset": args.preset, "parameters": mcfg.num_params(), "flops_per_token": fpt,
              "matmul_bf16_flops": matmul, "variants": rows}
    if args.home_config:
        result["home"] = home_run(args, out)
        print(json.dumps(result["home"]), flush=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    cols = ["variant", "tokens_per_s", "ms_per_step", "mfu_datasheet", "mfu_measured_matmul", "peak_memory_gib",
            "planned_gib", "wall_s", "rc"]
    print("\n| " + " | ".join(cols) + " |\n" + "|---" * len(cols) + "|")
    for r in rows:
        print("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    return 0 if all(r["rc"] == 0 for r in rows) and result.get("home", {}).get("rc", 0) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
