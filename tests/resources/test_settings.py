"""YunqueSettings: the preset and typed overrides as Dagster run config (what the
launchpad shows and validates), and as the CLI builds them."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest

from resources.overrides import ConfigOverrides, as_dict
from resources.settings import YunqueSettings
from stages.config import preset


@dg.asset
def resolved(settings: YunqueSettings) -> dict:
    cfg = settings.data_config()
    return {"steps": cfg.train.steps, "dtype": cfg.train.dtype, "dim": cfg.model.dim,
            "threshold": cfg.langid.threshold, "top_n": cfg.filters.gopher_repetition.top_n_grams,
            "promotion": (cfg.promotion.alias, cfg.promotion.max_bpb_increase)}


def launch(overrides: dict, preset: str = "tiny") -> dg.ExecuteInProcessResult:
    """A run whose settings come from run config, as the launchpad submits it."""
    run_config = {"resources": {"settings": {"config": {"home": "/nonexistent", "preset": preset,
                                                         "overrides": overrides}}}}
    return dg.materialize([resolved], resources={"settings": YunqueSettings.build("/nonexistent", "tiny", {})},
                          run_config=run_config, raise_on_error=False)


def test_typed_overrides_from_run_config_reach_the_tree():
    result = launch({"train": {"steps": 70, "dtype": "fp32"}, "model": {"preset": "small"},
                     "langid": {"threshold": 0.3},
                     "filters": {"gopher_repetition": {"top_n_grams": [[2, 0.3]]}},
                     "promotion": {"alias": "prod", "max_bpb_increase": 0.05}})
    assert result.success
    assert result.output_for_node("resolved") == {"steps": 70, "dtype": "fp32", "dim": 384, "threshold": 0.3,
                                                  "top_n": [(2, 0.3)], "promotion": ("prod", 0.05)}


@pytest.mark.parametrize("overrides, message", [
    ({"train": {"stepz": 7}}, 'unexpected config entry "stepz"'),
    ({"train": {"steps": "many"}}, "is not valid for expected type"),
    ({"train": {"dtype": "fp16"}}, "not in enum type"),
    ({"dedup": 5}, "dedup"),
    ({"promotion": {"max_accuracy_drop": "some"}}, "is not valid for expected type"),
])
def test_the_launchpad_rejects_bad_overrides_before_the_run(overrides, message):
    with pytest.raises(dg.DagsterInvalidConfigError, match=message):
        launch(overrides)


@pytest.mark.parametrize("overrides, message", [
    ({"langid": {"threshold": 1.5}}, "config key 'langid.threshold': Input should be less than or equal to 1"),
    ({"promotion": {"alias": "latest"}}, "config key 'promotion.alias': Value error, 'latest'"),
    ({"promotion": {"registered_model": "a/b"}}, "config key 'promotion.registered_model': String should match"),
])
def test_a_range_error_fails_the_run_naming_the_key(overrides, message):
    result = launch(overrides)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert message in str(failure.step_failure_data.error.message)


@dg.asset
def first(settings: YunqueSettings) -> int:
    return id(settings.data_config())


@dg.asset(deps=[first])
def second(settings: YunqueSettings) -> int:
    return id(settings.data_config())


def test_a_run_builds_its_tree_once(monkeypatch):
    """The CLI's check, the settings resource and every asset of a run share one tree:
    stages.config.preset (validation, profile and calibration) runs once for them all."""
    import stages.settings

    built = []
    monkeypatch.setattr(stages.settings, "preset", lambda *a, **k: built.append(a) or preset(*a, **k))
    overrides = {"langid": {"threshold": 0.4321}, "dedup.bands": 13}  # settings no other test builds
    settings = YunqueSettings.build("/nonexistent", "smoke", overrides)
    result = dg.materialize([first, second], resources={"settings": settings})
    assert result.success and len(built) == 1
    assert result.output_for_node("first") == result.output_for_node("second") == id(settings.data_config())
    # other settings are another tree
    assert YunqueSettings.build("/nonexistent", "smoke", {"dedup.bands": 12}).data_config().dedup.bands == 12
    assert len(built) == 2


def test_build_checks_first_and_keeps_only_what_was_set():
    s = YunqueSettings.build("/h", "tiny", '{"langid.threshold": 0.5, "model": "small", "export.gguf": []}')
    assert as_dict(s.overrides) == {"langid": {"threshold": 0.5}, "model": {"preset": "small"},
                                    "export": {"gguf": []}}
    assert s.data_config().model.dim == 384
    with pytest.raises(ValueError, match="unknown config key 'langid.nope'"):
        YunqueSettings.build("/h", "tiny", {"langid.nope": 1})


def test_the_daemon_timing_comes_from_the_process_then_the_home_then_the_defaults(tmp_path, monkeypatch):
    """Dagster reads a sensor's interval and a schedule's cron from code, when a code
    location loads: every process that loads it finds them in the home's settings, and an
    environment variable of one process still overrides them for that process."""
    from stages.store import home

    monkeypatch.delenv("YUNQUE_SENSOR_INTERVAL", raising=False)
    monkeypatch.delenv("YUNQUE_TRAINING_CRON", raising=False)
    assert home.timing(tmp_path) == home.Timing(home.SENSOR_INTERVAL_S, home.TRAINING_CRON)
    home.write(tmp_path, home.HomeSettings(corpus="c", sensor_interval_s=20, training_cron="*/3 * * * *"))
    assert home.timing(tmp_path) == home.Timing(20, "*/3 * * * *")
    monkeypatch.setenv("YUNQUE_TRAINING_CRON", "0 0 * * *")
    assert home.timing(tmp_path) == home.Timing(20, "0 0 * * *")


def test_importing_the_code_location_reads_no_settings_loading_it_does(tmp_path):
    """Resources are built when Dagster loads the location (`defs()`), not at import: a
    home whose yunque.json is broken still imports, and loading it names the file."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "yunque.json").write_text("{not json")
    env = {**os.environ, "YUNQUE_HOME": str(home), "DAGSTER_HOME": str(tmp_path / "dagster")}
    code = "import assets.definitions as d; print('imported'); d.defs()"
    done = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.startswith("imported"), done.stderr[-2000:]
    assert done.returncode != 0 and "yunque.json" in done.stderr, done.stderr[-2000:]


def test_the_launchpad_offers_the_supported_languages():
    """`language` (and its two advanced forms) is a choice of the packs' codes."""
    import pydantic

    from pipelines import languages

    got = ConfigOverrides.model_validate({"language": "fr", "langid": {"language": "fr"}})
    assert as_dict(got) == {"language": "fr", "langid": {"language": "fr"}}
    enum = type(got.language)
    assert sorted(e.value for e in enum) == sorted(languages.codes())
    with pytest.raises(pydantic.ValidationError):
        ConfigOverrides.model_validate({"language": "fr_FR"})
