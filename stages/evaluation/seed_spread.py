"""Runs of one recipe from several seeds, side by side (no torch, no Dagster): the
evaluation report's "across seeds" view.

A stage's recipe is the configuration that shapes its checkpoint, seeds and runtime
settings left out: the data, tokenizer, model and pretraining sections, and the
post-training sections of the stages on its chain (`grpo_model`'s recipe covers SFT,
reward, DPO, PPO and GRPO; `sft_model`'s only SFT). Each evaluated row is cached under
data/eval_report/rows/ and tagged, when first evaluated in an up-to-date chain, with its
stage's recipe and a hash of the evaluation settings, so rerunning the chain with another
`train.seed` (and `post.<stage>.seed`) in the same home adds a seed to the view. The view
shows, per stage, the mean and range over the seeds of the current recipe scored with the
current evaluation settings; per seed, perplexity is also divided by the base model of
the same seed, as the forgetting target is stated.
"""

from __future__ import annotations

import statistics
from typing import Any

from model.core.config import TrainConfig
from model.post.config import STAGE_TYPES
from pipelines.sections import PATH, RUNTIME, fields_with
from stages.asset_names import CHAIN
from stages.store.keys import cache_key

DATA = ("reader", "clean", "filters", "langid", "dedup", "tokenizer", "model")
METRICS = ("val_ppl", "ppl_ratio", "math_accuracy", "math_rephrased")


def _posts(stage: str) -> list[str]:
    """The post-training sections that shape `stage` (its chain, and the reward model PPO uses)."""
    if stage not in CHAIN:
        return []
    own, parent = CHAIN[stage]
    return sorted({*_posts(parent), own, *(_posts("reward_model") + ["reward"] if own == "ppo" else [])})


def recipe_key(config: dict[str, Any], stage: str) -> str:
    """`stage`'s recipe in a YunqueConfig.to_dict(): see the module's docstring."""
    shaping = {s: config.get(s, {}) for s in DATA}
    not_train = {"seed", *fields_with(TrainConfig, PATH, RUNTIME)}
    shaping["train"] = {k: v for k, v in config.get("train", {}).items() if k not in not_train}
    not_post = {p: {"seed", *fields_with(STAGE_TYPES[p], RUNTIME)} for p in _posts(stage)}
    shaping["post"] = {p: {k: v for k, v in config.get("post", {}).get(p, {}).items() if k not in skip}
                       for p, skip in not_post.items()}
    return cache_key(shaping)


def eval_key(config: dict[str, Any]) -> str:
    """The evaluation settings a row was scored with (rows of other settings are not averaged in)."""
    return cache_key(config.get("eval", {}))


def tag(row: dict, stage: str, recipe: str, scored_with: str, stale: bool, now: float) -> bool:
    """Tag a row on its first evaluation in an up-to-date chain (True: the row changed and
    should be written). A tagged row keeps its tag: the same weights reported later under
    another configuration were not trained by it. A row of an outdated chain stays untagged."""
    if stale or "recipe" in row:
        return False
    row |= {"stage": stage, "recipe": recipe, "scored_with": scored_with, "evaluated_at": now}
    return True


def latest_per_seed(rows: list[dict], recipes: dict[str, str], scored_with: str) -> dict[str, dict[Any, dict]]:
    """{stage: {seed: row}} of the rows tagged with their stage's recipe in `recipes` and
    scored with `scored_with`; the latest row of a seed wins."""
    out: dict[str, dict[Any, dict]] = {s: {} for s in recipes}
    for row in sorted(rows, key=lambda r: r.get("evaluated_at", 0)):
        stage = row.get("stage")
        if (stage in recipes and row.get("recipe") == recipes[stage] and row.get("scored_with") == scored_with
                and row.get("seed") is not None):
            out[stage][row["seed"]] = row
    return out


def spread(rows: list[dict], recipes: dict[str, str], scored_with: str) -> list[dict]:
    """One line per stage (in `recipes`' order, the base model first) with at least one
    seed: the seeds, and mean/min/max of each metric."""
    per = latest_per_seed(rows, recipes, scored_with)
    base = per.get(next(iter(recipes)), {})
    lines = []
    for stage, by_seed in per.items():
        if not by_seed:
            continue
        line: dict[str, Any] = {"stage": stage, "seeds": sorted(by_seed)}
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
