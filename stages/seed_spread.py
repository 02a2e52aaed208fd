"""Runs of one recipe from several seeds, side by side (no torch, no Dagster): the
evaluation report's "across seeds" view.

A recipe is the whole configuration that shapes a checkpoint (data, tokenizer, model,
pretraining, post-training) with every seed left out; the evaluation and export sections
are not part of it. Each evaluated row is cached under data/eval_report/rows/ with the
recipe it was evaluated under, so rerunning the chain with another `train.seed` (and
`post.<stage>.seed`) in the same home adds a seed to the view, and the view shows, per
stage, the mean and range over the seeds of that recipe. Per seed, perplexity is also
divided by the base model of the same seed, as the forgetting target is stated.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

SHAPING = ("reader", "clean", "filters", "langid", "dedup", "tokenizer", "model", "train", "post")
METRICS = ("val_ppl", "ppl_ratio", "math_accuracy", "math_rephrased")


def recipe_key(config: dict[str, Any]) -> str:
    """The recipe of a YunqueConfig.to_dict(): its shaping sections without seeds."""
    shaping = {s: config.get(s, {}) for s in SHAPING}
    shaping["train"] = {k: v for k, v in shaping["train"].items() if k != "seed"}
    shaping["post"] = {stage: {k: v for k, v in sec.items() if k != "seed"} if isinstance(sec, dict) else sec
                       for stage, sec in shaping["post"].items()}
    return hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:16]


def latest_per_seed(rows: list[dict], recipe: str, stages: tuple[str, ...]) -> dict[str, dict[Any, dict]]:
    """{stage: {seed: row}} of the rows evaluated under `recipe` (rows carry "stage",
    "seed", "recipe" and "evaluated_at"); the latest row of a seed wins."""
    out: dict[str, dict[Any, dict]] = {s: {} for s in stages}
    for row in sorted(rows, key=lambda r: r.get("evaluated_at", 0)):
        if row.get("recipe") == recipe and row.get("stage") in out and row.get("seed") is not None:
            out[row["stage"]][row["seed"]] = row
    return out


def spread(rows: list[dict], recipe: str, stages: tuple[str, ...]) -> list[dict]:
    """One line per stage with at least one seed: seeds, and mean/min/max of each metric."""
    per = latest_per_seed(rows, recipe, stages)
    base = per.get(stages[0], {})
    lines = []
    for stage in stages:
        by_seed = per[stage]
        if not by_seed:
            continue
        line: dict[str, Any] = {"stage": stage, "seeds": sorted(by_seed, key=str)}
        for m in METRICS:
            if m == "ppl_ratio":
                vals = [r["val_ppl"] / base[s]["val_ppl"] for s, r in by_seed.items()
                        if r.get("val_ppl") and base.get(s, {}).get("val_ppl")]
            else:
                vals = [r[m] for r in by_seed.values() if r.get(m) is not None]
            line[m] = {"mean": statistics.mean(vals), "min": min(vals), "max": max(vals)} if vals else None
        lines.append(line)
    return lines


def markdown(lines: list[dict]) -> list[str]:
    """The view as markdown lines; empty unless some stage has two seeds or more."""
    if not any(len(x["seeds"]) > 1 for x in lines):
        return []
    out = ["## Across seeds (this recipe)", "",
           ("Mean (min-max) over the seeds evaluated with this configuration, seeds aside; "
            "ppl_ratio divides each seed's perplexity by its own base model's."), "",
           "| stage | seeds | " + " | ".join(METRICS) + " |", "|" + "---|" * (len(METRICS) + 2)]
    for x in lines:
        cells = ["-" if x[m] is None else f"{x[m]['mean']:.4g} ({x[m]['min']:.4g}-{x[m]['max']:.4g})" for m in METRICS]
        out.append(f"| {x['stage']} | {', '.join(map(str, x['seeds']))} | " + " | ".join(cells) + " |")
    return out + [""]
