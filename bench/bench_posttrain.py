"""The post-training chain on CPU with the tiny preset: wall time per stage and held-out
math accuracy per stage (2-digit addition word problems, greedy, answers read from
<answer> tags), through the same Dagster graph `yunque run` materializes.

    python -m bench.bench_posttrain [--home DIR] [--corpus DIR] [--problems 200] [--overrides JSON]

The data stages and base_model run first if the home has no base model (timed apart).
Each post-training stage then runs as its own Dagster run, so its wall time includes
launching torchrun and loading its inputs. A stage already trained with the same recipe
and inputs is cached and shows its (short) wall time as such: start from a home without
post-training directories to time the chain.
"""

from __future__ import annotations

import argparse
import time

from bench import common  # noqa: F401 - telemetry switches

CHAIN = ("sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model")


def _accuracy(path: str, problems: int) -> dict:
    from model.checkpoint.load import load
    from model.core.config import EvalConfig
    from model.infer.evaluate import math_accuracy
    from pipelines.tasks import math_tasks

    loaded = load(path)
    r = math_accuracy(loaded, math_tasks.math_eval_set("es_add2", problems), EvalConfig(batch_size=50))
    return {"accuracy": r["accuracy"], "format_rate": r["format_rate"]}


def _run(corpus: str, select: str, overrides: str) -> float:
    from orchestration.runner import run_graph

    t0 = time.perf_counter()
    summary = run_graph(corpus, select, "tiny", overrides)
    if not summary.ok:
        raise SystemExit(f"{select} failed: {[r.error for r in summary.runs if not r.ok]}")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", default=None, help="YUNQUE_HOME (default: $YUNQUE_HOME or ./.yunque)")
    p.add_argument("--corpus", default=None, help="default: $YUNQUE_HOME/sample (yunque fetch-sample)")
    p.add_argument("--problems", type=int, default=200, help="held-out es_add2 problems per stage")
    p.add_argument("--overrides", default="{}", help="JSON config overrides, as for `yunque run`")
    args = p.parse_args(argv)

    from yunque import env

    home = env.use_home(args.home)
    corpus = args.corpus or str(home / "sample")
    from model.checkpoint import state as ckpt

    rows = []
    if ckpt.latest(home / "data" / "base_model") is None:
        rows.append({"stage": "data + base_model", "wall_s": _run(corpus, "+key:base_model", args.overrides)})
    rows.append({"stage": "base_model", "wall_s": None})
    for stage in CHAIN:
        rows.append({"stage": stage, "wall_s": _run(corpus, f"key:{stage}", args.overrides)})
    for r in rows:
        if r["stage"] in ("base_model", *CHAIN) and r["stage"] != "reward_model":
            r |= _accuracy(str(home / "data" / r["stage"]), args.problems)
    _print(rows, args.problems)
    return 0


def _print(rows: list[dict], problems: int) -> None:
    print(f"\nheld-out 2-digit addition word problems (es_add2, {problems} problems, greedy)\n")
    print("| stage | wall time (s) | accuracy | answer format |")
    print("|---|---|---|---|")
    for r in rows:
        wall = f"{r['wall_s']:.0f}" if r.get("wall_s") is not None else "-"
        acc = f"{r['accuracy']:.1%}" if "accuracy" in r else "-"
        fmt = f"{r['format_rate']:.1%}" if "format_rate" in r else "-"
        print(f"| {r['stage']} | {wall} | {acc} | {fmt} |")
    chain = [r for r in rows if r["stage"] in CHAIN and r.get("wall_s") is not None]
    print(f"\npost-training chain: {sum(r['wall_s'] for r in chain):.0f} s")
    acc = {r["stage"]: r.get("accuracy") for r in rows}
    if acc.get("sft_model") is not None and acc.get("grpo_model") is not None:
        print(f"GRPO - SFT: {100 * (acc['grpo_model'] - acc['sft_model']):+.1f} points "
              f"(targets: SFT >= 50%, GRPO >= SFT + 10)")


if __name__ == "__main__":
    raise SystemExit(main())
