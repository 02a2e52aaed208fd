"""The evaluation report's "across seeds" view: rows of one recipe (the configuration
with seeds left out) from several seeds, mean and range per stage."""

from __future__ import annotations

import shutil

from stages import seed_spread
from stages.config import preset
from stages.evaluation import evaluate_all
from stages.store import DataStore
from tests.factory import tiny_checkpoint
from tests.test_lineage import record_base

STAGES = ("base_model", "sft_model", "grpo_model")


def test_recipe_ignores_seeds_and_nothing_else():
    a = preset("tiny").to_dict()
    seeded = preset("tiny", {"train.seed": 3, "post.sft.seed": 3, "post.grpo.seed": 3}).to_dict()
    assert seed_spread.recipe_key(a) == seed_spread.recipe_key(seeded)
    assert seed_spread.recipe_key(a) == seed_spread.recipe_key(preset("tiny", {"eval.math_problems": 7}).to_dict())
    assert seed_spread.recipe_key(a) != seed_spread.recipe_key(preset("tiny", {"post.sft.steps": 7}).to_dict())
    assert seed_spread.recipe_key(a) != seed_spread.recipe_key(preset("tiny", {"train.lr": 1e-2}).to_dict())


def _row(stage, seed, ppl, math, at, recipe="r"):
    return {"stage": stage, "seed": seed, "val_ppl": ppl, "math_accuracy": math, "math_rephrased": math / 2,
            "recipe": recipe, "evaluated_at": at}


def test_spread_per_stage_with_ratios_to_each_seeds_own_base():
    rows = [_row("base_model", 0, 50.0, 0.0, 1), _row("base_model", 1, 100.0, 0.0, 2),
            _row("sft_model", 0, 60.0, 0.4, 3), _row("sft_model", 1, 110.0, 0.8, 4),
            _row("sft_model", 1, 999.0, 0.0, 0),  # an earlier row of seed 1: the latest wins
            _row("sft_model", 2, 70.0, 0.9, 5, recipe="other")]  # another recipe: left out
    lines = {x["stage"]: x for x in seed_spread.spread(rows, "r", STAGES)}
    assert set(lines) == {"base_model", "sft_model"} and lines["sft_model"]["seeds"] == [0, 1]
    sft = lines["sft_model"]
    assert sft["val_ppl"] == {"mean": 85.0, "min": 60.0, "max": 110.0}
    assert sft["ppl_ratio"]["min"] == 1.1 and abs(sft["ppl_ratio"]["max"] - 1.2) < 1e-12
    assert abs(sft["math_accuracy"]["mean"] - 0.6) < 1e-12 and sft["math_rephrased"]["max"] == 0.4
    md = "\n".join(seed_spread.markdown(list(lines.values())))
    assert "## Across seeds" in md and "| sft_model | 0, 1 | 85 (60-110) |" in md
    assert seed_spread.markdown(seed_spread.spread(rows[:1], "r", STAGES)) == []  # one seed: no view


def test_report_gathers_seeds_of_the_same_recipe(tmp_path):
    """evaluate_all over two base models of seeds 0 and 1 in one home: the second report
    shows both; a changed recipe starts a view of its own."""
    store = DataStore(tmp_path / "home")
    small = {"eval.math_problems": 4, "eval.sample_tokens": 4, "eval.math_max_new_tokens": 4, "eval.val_batches": 1}

    def run(seed: int, **extra) -> dict:
        shutil.rmtree(store.dir("base_model"), ignore_errors=True)
        record_base(tiny_checkpoint(store.data, seed=seed, train_config={"seed": seed}))
        return evaluate_all(store, preset("tiny", {**small, "train.seed": seed, **extra}))["report"]

    first = run(0)
    assert [x["seeds"] for x in first["across_seeds"]] == [[0]]
    assert "Across seeds" not in (store.dir("eval_report") / "report.md").read_text()
    second = run(1)
    assert [x["seeds"] for x in second["across_seeds"]] == [[0, 1]]
    assert "| base_model | 0, 1 |" in (store.dir("eval_report") / "report.md").read_text()
    other = run(1, **{"train.lr": 1e-2})  # the same weights, reported under a new recipe: one seed
    assert [x["seeds"] for x in other["across_seeds"]] == [[1]]
