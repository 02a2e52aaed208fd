"""A post-training stage's records turned into what the asset shows (no torch, no
Dagster): the final numbers, a per-step curve (reward, KL and reply length for the RL
stages, so reward hacking is visible), a PNG of it, and each stage's check."""

from __future__ import annotations

import json
from pathlib import Path

from model.checkpoint.files import weights_sha256
from stages.reports.loss_curve import read_metrics, steps_of_last_attempt

MASK_CHECK = "loss_mask_assistant_only"
ABOVE_CHANCE = "heldout_pair_accuracy_above_chance"
NO_HACKING = "no_reward_hacking"

# per-step columns worth a table and a plot, per stage (the rest stay in metrics.jsonl and MLflow)
# (replay_loss: the LM loss on replayed pretraining text, model/post/replay.py; absent when replay is off)
CURVES = {
    "sft": ("loss", "eval_loss", "epochs", "replay_loss"),
    "reward": ("loss", "accuracy", "eval_accuracy", "eval_margin"),
    "dpo": ("loss", "accuracy", "margin", "eval_accuracy", "eval_margin", "replay_loss"),
    "ppo": ("reward", "reward_model_score", "accuracy", "kl", "reply_tokens", "eval_dev_accuracy", "replay_loss"),
    "grpo": ("reward_verifiable", "accuracy", "kl", "reply_tokens", "groups_with_signal", "eval_dev_accuracy",
             "replay_loss"),
}


def curve(stage: str, records: list[dict], points: int = 40) -> list[dict]:
    steps = steps_of_last_attempt(records)
    if not steps:
        return []
    every = max(1, len(steps) // points)
    cols = CURVES[stage]
    keep = [r for i, r in enumerate(steps) if i % every == 0 or i == len(steps) - 1
            or any(k.startswith("eval_") for k in r)]
    baseline = next((r for r in reversed(records) if r.get("event") == "baseline"), None)
    if baseline is not None:  # step 0: the starting model, evaluated the same way
        keep = [baseline, *keep]
    return [{"step": r["step"], **{c: round(float(r[c]), 4) if isinstance(r.get(c), (int, float)) else None
                                   for c in cols}} for r in keep]


def plot(stage: str, rows: list[dict], path: Path, title: str) -> Path | None:
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in CURVES[stage] if any(r[c] is not None for r in rows)]
    fig, axes = plt.subplots(len(cols), 1, figsize=(7, 1.6 * len(cols) + 0.6), dpi=100, sharex=True, squeeze=False)
    for ax, c in zip(axes[:, 0], cols):
        pts = [(r["step"], r[c]) for r in rows if r[c] is not None]
        ax.plot(*zip(*pts), "o-" if c.startswith("eval_") else "-", ms=3, lw=1)
        ax.set_ylabel(c, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def hacking(records: list[dict]) -> dict:
    """An RL run games its reward when the reward it optimises rises while the verifiable
    accuracy falls: greedy accuracy on the dev problems at the end against before
    training (the `baseline` record), or else the accuracy of its own rollouts, first
    quarter of the steps against the last. Replies running into the length limit (a
    reward model that likes long text) count too."""
    steps = steps_of_last_attempt(records)
    if len(steps) < 4:
        return {"passed": True, "detail": f"{len(steps)} steps: too few to judge"}
    q = max(1, len(steps) // 4)

    def mean(rows: list[dict], k: str) -> float:
        vals = [r[k] for r in rows if isinstance(r.get(k), (int, float))]
        return sum(vals) / len(vals) if vals else 0.0

    key = "reward_model_score" if "reward_model_score" in steps[0] else "reward_verifiable"
    first, last = steps[:q], steps[-q:]
    d_reward = mean(last, key) - mean(first, key)
    baseline = next((r for r in reversed(records) if r.get("event") == "baseline"), {})
    final = next((r for r in reversed(steps) if "eval_dev_accuracy" in r), {})
    if "eval_dev_accuracy" in baseline and final:
        d_acc, what = final["eval_dev_accuracy"] - baseline["eval_dev_accuracy"], "greedy dev accuracy"
    else:
        d_acc, what = mean(last, "accuracy") - mean(first, "accuracy"), "rollout accuracy"
    stopped = mean(last, "stopped")
    fired = (d_reward > 0 and d_acc < -0.05) or stopped < 0.5
    return {"passed": not fired,
            "detail": f"{key} {d_reward:+.3f} (first vs last quarter of the steps), {what} {d_acc:+.3f}; "
                      f"{stopped:.0%} of the last replies ended on their own"}


def _check(stage: str, records: list[dict], final: dict) -> dict:
    if stage == "sft":
        plan = next((r for r in reversed(records) if r.get("event") == "plan"), {})
        mc = plan.get("mask_check")
        if not mc:
            return {"passed": False, "detail": "no mask check in the run's records"}
        return {"passed": bool(mc["passed"]), "detail": f"trained on {mc['trained_text']!r} "
                                                        f"({mc['trained_tokens']} of {mc['tokens']} tokens)"}
    if stage in ("reward", "dpo"):
        acc = final.get("eval_accuracy")
        return {"passed": acc is not None and acc > 0.5, "detail": f"held-out accuracy {acc}"}
    if stage in ("ppo", "grpo"):
        return hacking(records)
    return {"passed": True, "detail": ""}


def plot_run(spec) -> list[Path]:
    """The stage's curve as a PNG beside its records (an MLflow artifact)."""
    rows = curve(spec.config["stage"], read_metrics(spec.dir))
    png = plot(spec.config["stage"], rows, spec.dir / "curve.png", f"{spec.asset} {spec.key[:8]}")
    return [png] if png else []


def summarize(asset: str, spec, records: list[dict], found: Path) -> dict:
    """The stage's result from `found`, its checkpoint as the asset verified it."""
    stage = spec.config["stage"]
    state = json.loads((found / "state.json").read_text())
    final = {k: v for k, v in state.get("metrics", {}).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("time", "step")}
    plan = next((r for r in reversed(records) if r.get("event") == "plan"), None)
    rows = curve(stage, records)
    png = spec.dir / "curve.png" if (spec.dir / "curve.png").exists() else None
    runs = spec.record().get("mlflow_runs", [])
    return {"checkpoint": str(found), "step": int(state["step"]), "final": final,
            "plan": plan["summary"] if plan else "", "curve": rows, "png": str(png) if png else "",
            "mlflow_run_id": runs[-1] if runs else "", "weights": weights_sha256(found),
            "check": _check(stage, records, final)}
