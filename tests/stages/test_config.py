import json

import pytest

from stages.config import ConfigError, nest, preset, schema


def test_dotted_and_nested_overrides():
    cfg = preset("tiny", {"langid.threshold": 0.5, "filters": {"c4": {"enabled": False}}})
    assert cfg.langid.threshold == 0.5
    assert cfg.filters.c4.enabled is False
    assert cfg.dedup.num_perm == 112  # 14 bands x 8 rows


def test_nest_merges_dotted_and_nested_forms():
    assert nest({"a.b": 1, "a": {"c": 2}, "d": 3}) == {"a": {"b": 1, "c": 2}, "d": 3}
    assert nest({"a.b.c": 1, "a": {"b": {"d": 2}}}) == {"a": {"b": {"c": 1, "d": 2}}}


@pytest.mark.parametrize("overrides", [{"model.n_layers": 3, "model": "small"},
                                       {"model": "small", "model.n_layers": 3},
                                       {"model": {"preset": "small", "n_layers": 3}}])
def test_model_preset_then_its_fields_in_any_order(overrides):
    cfg = preset("tiny", overrides)
    assert (cfg.model.dim, cfg.model.n_layers) == (384, 3)


@pytest.mark.parametrize("overrides", [{"dedup": 5, "dedup.ngram": 3}, {"dedup.ngram": 3, "dedup": 5}])
def test_a_key_given_a_value_and_fields_is_an_error_in_any_order(overrides):
    with pytest.raises(ConfigError, match="config key 'dedup' is given both a value and fields"):
        preset("tiny", overrides)


@pytest.mark.parametrize("overrides, message", [
    ({"langid.nope": 1}, "unknown config key 'langid.nope'"),
    ({"langid.treshold": 0.5}, "unknown config key 'langid.treshold' (did you mean 'langid.threshold'?)"),
    ({"trian.steps": 5}, "(did you mean 'train'?)"),
    ({"dedup": 5}, "config key 'dedup' is a section, not a value: set its fields, e.g. 'dedup.ngram'"),
    ({"post.sft": "fast"}, "config key 'post.sft' is a section"),
    ({"train.steps.x": 1}, "config key 'train.steps' is a value, not a section"),
    ({"langid.threshold": "0.9"}, "config key 'langid.threshold': Input should be a valid number"),
    ({"train.steps": "100"}, "config key 'train.steps': Input should be a valid integer"),
    ({"train.steps": 0}, "config key 'train.steps': Input should be greater than or equal to 1"),
    ({"train.steps": 2.5}, "config key 'train.steps'"),
    ({"langid.threshold": 1.5}, "config key 'langid.threshold': Input should be less than or equal to 1"),
    ({"train.dtype": "fp16"}, "config key 'train.dtype': Input should be 'fp32', 'bf16' or 'auto'"),
    ({"post.dpo.loss": "ipo"}, "config key 'post.dpo.loss': Input should be 'dpo', 'orpo' or 'kto'"),
    ({"post.grpo.group": 1}, "config key 'post.grpo.group': Input should be greater than or equal to 2"),
    ({"post.grpo.temperature": 0}, "config key 'post.grpo.temperature': Input should be greater than 0"),
    ({"export.gguf": ["q5_k"]}, "config key 'export.gguf.0'"),
    ({"tokenizer.vocab_size": 100}, "config key 'tokenizer.vocab_size': Input should be greater than or equal to 272"),
    ({"model.n_kv_heads": "2"}, "config key 'model.n_kv_heads': Input should be a valid integer"),
    ({"post.ppo.minibatches": 99}, "post.ppo.minibatches must be between 1 and batch_size"),
    ({"train.seq_len": 4096}, "train.seq_len (4096) exceeds model.context (256)"),
    ({"language": "fr", "langid.language": "en"}, "must name the same language"),
    ({"language": "xx"}, "config key 'language': unknown language 'xx'; supported: ca, de, en, es, fr"),
    ({"filters.language": "frr"}, "config key 'filters.language': unknown language 'frr' (did you mean 'fr'?)"),
    ({"model": "huge"}, "unknown model preset 'huge'"),
])
def test_bad_overrides_fail_with_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        preset("tiny", overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown preset 'tinny' \(did you mean 'tiny'\?\); choose one of"):
        preset("tinny")


def test_json_types_a_user_writes_are_accepted():
    cfg = preset("tiny", {"post.ppo.betas": [0.9, 0.999], "train.lr": 1, "export.gguf": [],
                          "model.n_kv_heads": None, "model": "small"})
    assert cfg.post.ppo.betas == (0.9, 0.999) and cfg.train.lr == 1.0 and cfg.export.gguf == ()
    assert cfg.model.dim == 384  # the small preset


def test_sections_validate_assignment():
    cfg = preset("tiny")
    with pytest.raises(ValueError, match="threshold"):
        cfg.langid.threshold = 2.0


def test_resolved_tree_round_trips_through_json():
    cfg = preset("tiny", {"dedup.bands": 20})
    again = preset("tiny", json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


def test_section_hash_only_changes_with_its_section():
    a, b = preset("tiny"), preset("tiny", {"dedup.bands": 20})
    assert a.section_hash("reader", "clean") == b.section_hash("reader", "clean")
    assert a.section_hash("dedup") != b.section_hash("dedup")


def test_one_language_setting_drives_both_sections():
    cfg = preset("tiny", {"language": "fr"})
    assert cfg.language == cfg.langid.language == cfg.filters.language == "fr"
    # FineWeb-2's French thresholds under the docs profile's changes
    assert cfg.filters.gopher_quality.min_avg_word_length == 2 and cfg.filters.fineweb.line_punct_thr == 0.03


@pytest.mark.parametrize("given", ["fr_FR", "fr-FR", "FR", "fra", "French"])
def test_language_spellings_are_normalised(given):
    assert preset("tiny", {"language": given}).language == "fr"


@pytest.mark.parametrize("overrides", [{"langid.language": "en", "filters.language": "en"},
                                       {"langid.language": "en"}, {"filters": {"language": "en"}}])
def test_the_old_language_keys_still_choose_the_language(overrides):
    """Before the one key, a language took both sections' keys; either alone now sets it."""
    cfg = preset("tiny", overrides)
    assert cfg.language == cfg.langid.language == cfg.filters.language == "en"


def test_schema_describes_every_section():
    s = schema()
    text = json.dumps(s)
    for name in ("reader", "filters", "langid", "dedup", "tokenizer", "model", "train", "post", "eval", "export"):
        assert name in s["properties"]
    assert '"fp32"' in text and '"minimum": 1' in text


def test_smoke_is_every_stage_of_tiny_made_short_and_never_the_champion():
    """`smoke` trains the same model shape as `tiny` with a few steps of every training
    stage, and registers its export under a name of its own."""
    smoke, tiny = preset("smoke"), preset("tiny")
    assert smoke.model == tiny.model
    assert smoke.train.steps < tiny.train.steps and smoke.train.steps <= 20 and not smoke.train.compile
    for stage in ("sft", "reward", "dpo", "ppo", "grpo"):
        short, full = getattr(smoke.post, stage), getattr(tiny.post, stage)
        assert 0 < short.steps <= 4 < full.steps, stage
        assert short.eval_every <= short.steps and short.checkpoint_every <= short.steps, stage
    assert smoke.eval.math_problems < tiny.eval.math_problems
    assert smoke.promotion.registered_model != tiny.promotion.registered_model


def test_a_programs_config_file_is_read_into_one_typed_object_and_refuses_what_it_does_not_know():
    """train_config.json round-trips through PretrainRun / PostRun, values validated on
    the way in; an unknown key or stage is an error naming the file, not ignored."""
    import json

    from model.core.config import PretrainRun
    from model.post.config import PostRun

    cfg = preset("tiny")
    run = PretrainRun(cfg.train, cfg.model)
    assert PretrainRun.from_json(json.loads(json.dumps(run.to_json()))) == run
    with pytest.raises(ValueError, match=r"train_config.json: unknown keys \['trian'\]"):
        PretrainRun.from_json({**run.to_json(), "trian": {}})
    with pytest.raises(ValueError, match="steps"):
        PretrainRun.from_json({"train": {"steps": 0}, "model": {}})
    post = PostRun(stage="dpo", train=cfg.post.dpo, init="a", out="b", replay_shards=["s"])
    back = PostRun.from_json(json.loads(json.dumps(post.to_json())))
    assert back == post and back.train.loss == "dpo"
    with pytest.raises(ValueError, match="stage 'sftt' is not one of"):
        PostRun.from_json({**post.to_json(), "stage": "sftt"})
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        PostRun.from_json({**post.to_json(), "extra": 1})


@pytest.mark.parametrize(("overrides", "error"), [
    ({"train.lr": 1e400}, "config key 'train.lr': inf is not a finite number (a JSON number too large for a double"),
    ({"post.sft.min_lr": float("nan")}, "config key 'post.sft.min_lr': nan is not a finite number"),
    ({"train.min_lr": 0.01, "train.lr": 0.001}, "train.min_lr (0.01) exceeds train.lr (0.001)"),
    ({"train.warmup": 1600}, "train.warmup (1600) is not shorter than train.steps (1600)"),
    ({"post.dpo.min_lr": 1e-3}, "post.dpo.min_lr (0.001) exceeds post.dpo.lr (5e-05)"),
    ({"post.sft.steps": 20}, "post.sft.warmup (20) is not shorter than post.sft.steps (20)"),
])
def test_settings_that_cannot_work_are_refused_across_fields(overrides, error):
    with pytest.raises(ConfigError) as e:
        preset("tiny", overrides)
    assert error in str(e.value)
    assert "\n" not in str(e.value)
