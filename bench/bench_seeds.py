"""Do the results hold across seeds? The same recipe from N fresh base models.

    python -m bench.bench_seeds --from HOME [--seeds 0 1 2] [--out DIR] [--overrides JSON]

HOME is a home whose data stages and tokenizer are done (`yunque run` once). Each seed
gets a home under --out sharing HOME's data outputs and trains the whole chain through
`yunque run` with every seed set; <out>/seeds.md gets per-seed perplexities and held-out
math, the targets of issue 18, and mean and range. Resumable. docs/benchmarks.md#not-run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench import common  # noqa: F401 - telemetry switches

SHARED = ("raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "dedup_index",
          "deduped_documents", "rejected_documents", "tokenizer", "token_shards")
STAGES = ("base_model", "sft_model", "dpo_model", "ppo_model", "grpo_model")
POST = ("sft", "reward", "dpo", "ppo", "grpo")


def seed_home(source: Path, out: Path, seed: int) -> Path:
    """A home for `seed` sharing `source`'s data outputs by hard links."""
    home = out / f"seed-{seed}"
    if not (home / "data" / "token_shards").exists():
        for name in SHARED:
            if (source / "data" / name).exists():
                shutil.copytree(source / "data" / name, home / "data" / name, copy_function=os.link,
                                dirs_exist_ok=True)
        shutil.copy2(source / "yunque.json", home / "yunque.json")
    return home


def overrides_for(seed: int, extra: dict) -> dict:
    return {"train.seed": seed, **{f"post.{s}.seed": seed for s in POST}, **extra}


def run_seed(home: Path, seed: int, extra: dict) -> dict:
    """Train and evaluate the chain in `home` (unless its report exists); its report.json."""
    report = home / "data" / "eval_report" / "report.json"
    if not report.exists():  # as a user runs it: `yunque --home H run`, the daemon, the backfill
        select = " or ".join(f"key:{k}" for k in (*STAGES[:2], "reward_model", *STAGES[2:], "eval_report"))
        cmd = [sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--preset", "tiny",
               "--select", select, "--overrides", json.dumps(overrides_for(seed, extra))]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise SystemExit(f"seed {seed}: {' '.join(cmd)} failed")
    return json.loads(report.read_text())


def figures(report: dict) -> dict:
    rows = {r["stage"]: r for r in report["table"]}
    base = rows["base_model"]["val_ppl"]
    out = {"base_ppl": base}
    for s in STAGES[1:]:
        r = rows.get(s, {})
        out[f"{s}/ppl_ratio"] = round(r["val_ppl"] / base, 3) if r.get("val_ppl") and base else None
        out[f"{s}/math"] = r.get("math_accuracy")
        out[f"{s}/rephrased"] = r.get("math_rephrased")
    sft, grpo = out["sft_model/rephrased"], out["grpo_model/rephrased"]
    out["sft_target"] = sft is not None and sft >= 0.5
    out["grpo_target"] = sft is not None and grpo is not None and grpo >= sft + 0.05
    return out


def table(per_seed: dict[int, dict]) -> str:
    cols = ["base_ppl"] + [f"{s}/{k}" for s in STAGES[1:] for k in ("ppl_ratio", "math", "rephrased")]
    lines = ["| seed | " + " | ".join(cols) + " | SFT >= 50% | GRPO >= SFT + 5 |",
             "|---" * (len(cols) + 3) + "|"]
    for seed, f in per_seed.items():
        lines.append(f"| {seed} | " + " | ".join(_fmt(f[c]) for c in cols)
                     + f" | {'yes' if f['sft_target'] else 'no'} | {'yes' if f['grpo_target'] else 'no'} |")
    stats = []
    for c in cols:
        vals = [f[c] for f in per_seed.values() if f[c] is not None]
        stats.append(f"{statistics.mean(vals):.3g} ({min(vals):.3g}-{max(vals):.3g})" if vals else "-")
    lines.append("| mean (range) | " + " | ".join(stats) + " | "
                 + f"{sum(f['sft_target'] for f in per_seed.values())}/{len(per_seed)} | "
                 + f"{sum(f['grpo_target'] for f in per_seed.values())}/{len(per_seed)} |")
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="a home whose data stages are done")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="/tmp/work/seeds")
    p.add_argument("--overrides", default="{}", help="JSON config overrides on top of the seed's")
    args = p.parse_args(argv)
    out, extra = Path(args.out), json.loads(args.overrides)
    per_seed = {}
    for seed in args.seeds:
        home = seed_home(Path(args.source), out, seed)
        per_seed[seed] = figures(run_seed(home, seed, extra))
        print(f"seed {seed}: {json.dumps(per_seed[seed])}", flush=True)
    text = table(per_seed)
    (out / "seeds.md").write_text(text)
    print("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
