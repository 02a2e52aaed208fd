"""Data mixtures as configuration (`train.mixture`): validation, resolution against the
run's shards, the run key, the loader's shares (a real in-process run), the preflight plan
and the materialization's metadata."""

from __future__ import annotations

import json

import pytest

from model.core.config import MixtureSource, TrainConfig
from model.pretrain.mixture import MixtureError, assign, sources
from model.pretrain.preflight import plan
from stages.config import ConfigError, preset
from stages.store.outputs import DataStore
from stages.training.pretrain import prepare
from stages.training.runs import PretrainError
from tests.support.token_stores import SMALL, add_token_shard, set_tokenizer

MIX = [{"name": "web", "shards": ["web-*"], "weight": 3}, {"name": "docs", "shards": ["docs"], "weight": 1}]


def _src(name: str, shards: list[str], weight: float) -> MixtureSource:
    return MixtureSource(name=name, shards=shards, weight=weight)


@pytest.mark.parametrize("mixture, match", [
    ([{"name": "web", "shards": ["a"], "weight": -1}], r"train\.mixture\.0\.weight.*greater than or equal to 0"),
    ([{"name": "web", "shards": ["a"], "weight": 1}, {"name": "web", "shards": ["b"], "weight": 1}],
     r"repeated: \['web'\]"),
    ([{"name": "web", "shards": ["a"], "weight": 0}], "sum above 0"),
    ([{"name": "web", "shards": [], "weight": 1}], r"train\.mixture\.0\.shards"),
    ([{"name": "web", "shards": ["a"]}], r"train\.mixture\.0\.weight.*required"),
])
def test_config_refuses_a_bad_mixture(mixture, match):
    with pytest.raises(ConfigError, match=match):
        preset("tiny", {"train.mixture": mixture})


def test_a_mixture_is_set_through_overrides():
    cfg = preset("tiny", {"train.mixture": MIX})
    assert [(s.name, s.shards, s.weight) for s in cfg.train.mixture] == [("web", ["web-*"], 3.0), ("docs", ["docs"], 1.0)]
    assert preset("tiny").train.mixture == []


def test_assign_matches_names_and_patterns_and_refuses_the_rest():
    mix = [_src("web", ["web-*"], 3), _src("docs", ["docs"], 1)]
    assert assign(mix, ["web-2", "docs", "web-1"]) == [["web-1", "web-2"], ["docs"]]
    assert assign(mix, ["/h/token_shards/web-1", "/h/token_shards/docs"]) == [["/h/token_shards/web-1"],
                                                                                ["/h/token_shards/docs"]]
    with pytest.raises(MixtureError, match=r"'docs': 'docs' matches no shard; the shards are \['web-1', 'web-2'\]"):
        assign(mix, ["web-1", "web-2"])
    with pytest.raises(MixtureError, match=r"one source only; \{'web-1': \['web', 'all'\]\}"):
        assign([*mix, _src("all", ["web-1"], 1)], ["web-1", "docs"])
    with pytest.raises(MixtureError, match=r"shards \['books'\] are in no source"):
        assign(mix, ["web-1", "docs", "books"])


def test_sources_weights_and_the_continuation_split():
    mix = [_src("web", ["web-*"], 3), _src("docs", ["docs"], 1), _src("junk", ["junk"], 0)]
    groups = [["web-1", "web-2"], ["docs"], ["junk"]]
    assert sources(mix, groups) == [("web", ["web-1", "web-2"], 0.75), ("docs", ["docs"], 0.25)]
    # continued: web-2 is new; the new part is all web, the replay part keeps the 3:1
    assert sources(mix, groups, {"web-1", "docs"}, 0.25) == [
        ("new/web", ["web-2"], 0.75), ("replay/web", ["web-1"], 0.25 * 0.75), ("replay/docs", ["docs"], 0.25 * 0.25)]
    with pytest.raises(MixtureError, match="weight 0"):
        sources(mix, [[], [], ["junk"]])


def test_the_plan_lists_tokens_and_epochs_per_source():
    from model.core.config import tiny

    p = plan(tiny(), batch_size=4, seq_len=32, memory=2**34, train_tokens=5000, steps=10,
             sources=[{"name": "web", "weight": 0.75, "train_tokens": 1000}, {"name": "docs", "weight": 0.25,
                                                                              "train_tokens": 4000}])
    assert [(s["name"], s["tokens_drawn"], s["epochs"]) for s in p.sources] == [("web", 960, 0.96), ("docs", 320, 0.08)]
    assert "source web: 75.0% of windows, 960 of 1,000 tokens = 0.96 epochs" in p.summary()
    assert p.to_dict()["sources"][1]["name"] == "docs"


@pytest.fixture()
def store(tmp_path) -> DataStore:
    store = DataStore(tmp_path / "home")
    set_tokenizer(store)
    for i, name in enumerate(["web-1", "web-2", "docs"]):
        add_token_shard(store, name, seed=i)
    return store


SHARDS = ["web-1", "web-2", "docs"]


def test_prepare_refuses_a_mixture_that_does_not_fit_the_shards(store):
    bad = [{"name": "web", "shards": ["wbe-*"], "weight": 3}, {"name": "docs", "shards": ["docs"], "weight": 1}]
    with pytest.raises(PretrainError, match=r"'wbe-\*' matches no shard; the shards are \['docs', 'web-1', 'web-2'\]"):
        prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": bad}))
    with pytest.raises(PretrainError, match=r"\['docs'\] are in no source"):
        prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": MIX[:1]}))


def test_the_mixture_is_part_of_the_run_key(store):
    plain = prepare(store, SHARDS, preset("tiny", SMALL))
    assert "mixture" not in plain.record()["recipe"]  # runs from before mixtures keep their keys
    mixed = prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": MIX}))
    assert mixed.key != plain.key and mixed.lineage["start"] == "fresh: recipe changed (train.mixture)"
    other = [{**MIX[0], "weight": 1}, MIX[1]]
    assert prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": other})).key not in (plain.key, mixed.key)
    assert prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": MIX})).key == mixed.key


def test_a_3_to_1_mixture_trains_in_those_proportions(store, monkeypatch):
    from assets.training.pretrain import continuation
    from model.checkpoint.files import latest
    from model.core.config import ModelConfig
    from model.pretrain.train import train

    spec = prepare(store, SHARDS, preset("tiny", {**SMALL, "train.mixture": MIX, "train.steps": 4,
                                                   "train.eval_every": 4}))
    t = spec.config["train"]
    assert [[p.rsplit("/", 1)[-1] for p in g] for g in t["mixture_shards"]] == [["web-1", "web-2"], ["docs"]]
    assert [(g["name"], g["shards"], g["weight"]) for g in spec.lineage["sources"]] == [
        ("web", ["web-1", "web-2"], 0.75), ("docs", ["docs"], 0.25)]
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("DAGSTER_PIPES_CONTEXT", raising=False)
    train(TrainConfig(**{**t, "betas": tuple(t["betas"])}), ModelConfig(**spec.config["model"]))
    state = latest(spec.dir).state()
    assert state["tokens_per_source"] == {"web": 12 * 32, "docs": 4 * 32}  # 4 steps of 4 windows, 3:1
    records = [json.loads(line) for line in (spec.dir / "metrics.jsonl").read_text().splitlines()]
    planned = next(r for r in records if r["event"] == "plan")
    assert [(s["name"], s["weight"], s["tokens_drawn"]) for s in planned["sources"]] == [
        ("web", 0.75, 384), ("docs", 0.25, 128)]
    assert "source docs: 25.0% of windows" in planned["summary"]
    md = continuation(spec, state)
    rows = [r.data for r in md["mixture"].records]
    assert [(r["source"], r["tokens_drawn"]) for r in rows] == [("web", 384), ("docs", 128)]
    assert rows[1]["epochs"] == round(128 / spec.lineage["sources"][1]["train_tokens"], 4)
    assert md["tokens_per_source.web"] == 384


def test_the_launchpad_takes_a_mixture():
    from resources.overrides import ConfigOverrides, as_dict

    given = ConfigOverrides(train={"mixture": MIX})
    assert as_dict(given) == {"train": {"mixture": [{**m, "weight": float(m["weight"])} for m in MIX]}}
    assert [s.name for s in preset("tiny", as_dict(given)).train.mixture] == ["web", "docs"]
