"""The loss curve of a training run, from its metrics.jsonl: the records as read back, a
PNG (MLflow artifact; with a second panel for the downstream evaluations during training
when there were any), the evaluation points as rows (Dagster metadata tables), and the
unigram entropy of the training tokens that the validation loss must beat."""

from __future__ import annotations

import json
from pathlib import Path


def steps_of_last_attempt(records: list[dict]) -> list[dict]:
    """Step records, the latest value per step (a resumed run re-logs the steps after its
    checkpoint)."""
    by_step = {}
    for r in records:
        if r.get("event") == "step":
            by_step[r["step"]] = r
    return [by_step[s] for s in sorted(by_step)]


def eval_rows(records: list[dict]) -> list[dict]:
    return [{"step": r["step"], "loss": round(r["loss"], 4), "val_loss": round(r["val_loss"], 4),
             "val_ppl": round(r["val_ppl"], 2), "val_bpb": round(r.get("val_bpb") or 0.0, 4),
             "tokens_seen": r["tokens_seen"]}
            for r in steps_of_last_attempt(records) if "val_loss" in r]


def downstream_rows(records: list[dict]) -> list[dict]:
    """The downstream evaluations during training (model.pretrain.downstream), one row each."""
    def num(r: dict, k: str) -> float | None:
        v = r.get(k)
        return round(float(v), 4) if isinstance(v, (int, float)) else None

    return [{"step": r["step"], "domain_qa_nll": num(r, "eval_domain_qa_nll"),
             "repeat_4_max": num(r, "eval_repeat_4_max"), "distinct_2_mean": num(r, "eval_distinct_2_mean"),
             "seconds": num(r, "eval_seconds"), "time_share": num(r, "eval_time_share"),
             "sample": (r.get("eval_sample") or "")[:120]}
            for r in steps_of_last_attempt(records) if "eval_seconds" in r]


def plot(records: list[dict], path: Path, title: str) -> Path | None:
    steps = steps_of_last_attempt(records)
    if not steps:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    down = [r for r in steps if "eval_seconds" in r]
    if down:  # a second panel: what the model knows of the domain and how it writes, while it trains
        fig, (ax, bx) = plt.subplots(2, 1, figsize=(7, 6.5), dpi=110, sharex=True)
        qa = [r for r in down if r.get("eval_domain_qa_nll") is not None]
        if qa:
            bx.plot([r["step"] for r in qa], [r["eval_domain_qa_nll"] for r in qa], "s-", ms=3,
                    label="domain QA (nats per answer token)")
        bx.plot([r["step"] for r in down], [r.get("eval_repeat_4_max", float("nan")) for r in down], "^-", ms=3,
                label="samples: repeated 4-grams (max)")
        bx.set_xlabel("step")
        bx.grid(alpha=0.3)
        bx.legend()
    else:
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], lw=0.8, alpha=0.7, label="train loss")
    evals = [r for r in steps if "val_loss" in r]
    if evals:
        ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", ms=3, label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def read_metrics(root: Path) -> list[dict]:
    path = root / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            continue
    return out


def unigram_entropy(shard_dirs: list[str], cap: int = 20_000_000) -> float:
    """Entropy in nats per token of the training tokens' unigram distribution (the first
    `cap` tokens of each shard): the loss of a model that ignores context, which a
    trained model must beat by a wide margin."""
    import numpy as np

    from pipelines.tokens.token_format import TokenShard

    counts = None
    for d in shard_dirs:
        shard = TokenShard.open(d)
        tokens = shard.split("train").tokens[:cap]
        c = np.bincount(tokens, minlength=shard.header["vocab_size"])
        counts = c if counts is None else counts + c
    if counts is None or counts.sum() == 0:
        return float("nan")
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
