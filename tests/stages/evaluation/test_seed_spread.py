"""The evaluation report's "across seeds" view: rows of one recipe (the configuration
with seeds left out) from several seeds, mean and range per stage."""

from __future__ import annotations

import shutil

from stages.config import preset
from stages.evaluation import seed_spread
from stages.evaluation.evaluate import evaluate_all
from stages.store.outputs import DataStore
from tests.support.factory import record_base, tiny_checkpoint

RECIPES = {"base_model": "rb", "sft_model": "rs", "grpo_model": "rg"}


def test_recipe_ignores_seeds_runtime_and_later_stages():
    a = preset("tiny").to_dict()
    seeded = preset("tiny", {"train.seed": 3, "post.sft.seed": 3, "post.grpo.seed": 3, "train.threads": 1,
                             "post.sft.checkpoint_every": 7, "eval.math_problems": 7}).to_dict()
    for stage in ("base_model", "sft_model", "grpo_model"):
        assert seed_spread.recipe_key(a, stage) == seed_spread.recipe_key(seeded, stage)
        assert seed_spread.recipe_key(a, stage) != seed_spread.recipe_key(preset("tiny", {"train.lr": 1e-2}).to_dict(),
                                                                          stage)
    grpo_changed = preset("tiny", {"post.grpo.steps": 7}).to_dict()
    assert seed_spread.recipe_key(a, "sft_model") == seed_spread.recipe_key(grpo_changed, "sft_model")
    assert seed_spread.recipe_key(a, "grpo_model") != seed_spread.recipe_key(grpo_changed, "grpo_model")
    assert seed_spread.recipe_key(a, "ppo_model") != seed_spread.recipe_key(
        preset("tiny", {"post.reward.steps": 70}).to_dict(), "ppo_model")  # PPO is scored by the reward model
    assert seed_spread.eval_key(a) != seed_spread.eval_key(seeded)


def test_a_row_is_tagged_once_and_never_in_an_outdated_chain():
    row: dict = {"seed": 0}
    assert not seed_spread.tag(row, "sft_model", "r1", "e", stale=True, now=1.0) and "recipe" not in row
    assert seed_spread.tag(row, "sft_model", "r1", "e", stale=False, now=2.0) and row["recipe"] == "r1"
    assert not seed_spread.tag(row, "sft_model", "r2", "e", stale=False, now=3.0)
    assert row["recipe"] == "r1" and row["evaluated_at"] == 2.0


def _row(stage, seed, ppl, math, at, recipe=None, scored="e"):
    return {"stage": stage, "seed": seed, "val_ppl": ppl, "math_accuracy": math, "math_rephrased": math / 2,
            "recipe": recipe or RECIPES[stage], "scored_with": scored, "evaluated_at": at}


def test_spread_per_stage_with_ratios_to_each_seeds_own_base():
    rows = [_row("base_model", 0, 50.0, 0.0, 1), _row("base_model", 1, 100.0, 0.0, 2),
            _row("base_model", 10, 100.0, 0.0, 2), _row("sft_model", 10, 100.0, 0.0, 2, scored="other"),
            _row("sft_model", 0, 60.0, 0.4, 3), _row("sft_model", 1, 110.0, 0.8, 4),
            _row("sft_model", 1, 999.0, 0.0, 0),  # an earlier row of seed 1: the latest wins
            _row("sft_model", 2, 70.0, 0.9, 5, recipe="other")]  # another recipe: left out
    lines = {x["stage"]: x for x in seed_spread.spread(rows, RECIPES, "e")}
    assert set(lines) == {"base_model", "sft_model"} and lines["sft_model"]["seeds"] == [0, 1]
    assert lines["base_model"]["seeds"] == [0, 1, 10]  # numeric order
    sft = lines["sft_model"]
    assert sft["val_ppl"] == {"mean": 85.0, "min": 60.0, "max": 110.0}
    assert sft["ppl_ratio"]["min"] == 1.1 and abs(sft["ppl_ratio"]["max"] - 1.2) < 1e-12
    assert abs(sft["math_accuracy"]["mean"] - 0.6) < 1e-12 and sft["math_rephrased"]["max"] == 0.4
    md = "\n".join(seed_spread.markdown(list(lines.values())))
    assert "## Across seeds" in md and "| sft_model | 0, 1 | 85 (60-110) |" in md
    assert seed_spread.markdown(seed_spread.spread(rows[:1], RECIPES, "e")) == []  # one seed: no view


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
    # the same weights reported under another recipe keep the one they were evaluated under
    other = run(1, **{"train.lr": 1e-2})
    assert other["across_seeds"] == []
    assert [x["seeds"] for x in run(1)["across_seeds"]] == [[0, 1]]
