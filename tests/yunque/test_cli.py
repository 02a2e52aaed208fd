"""The `yunque` console script as a user runs it: a real subprocess, a real instance."""

from __future__ import annotations

import json
import time

import polars as pl
import pytest

from tests.support.cli import yunque
from tests.support.factory import write_two_shards


def test_run_select_and_outputs(tmp_path):
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    home = tmp_path / "home"
    # a selection longer than a Dagster backfill title may be (100 characters) still runs
    select = " or ".join(["key:raw_documents"] * 6)
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--select", select)
    assert p.returncode == 0, p.stderr
    # both shards in one run (a batch): documents read in and kept, summed over the batch
    assert "[2 shards: foro .. manuales] raw_documents 2 shards 18->16" in p.stdout, p.stdout
    assert (home / "dagster" / "dagster.yaml").exists()
    raw = pl.read_parquet(f"{home}/data/raw_documents/*/*.parquet")
    assert set(raw["shard"]) == {"foro", "manuales"}


def test_bad_selection_is_a_clear_error(tmp_path):
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(corpus), "--select", "key:nonexistent")
    assert p.returncode == 2
    assert "matches no asset" in p.stderr


def test_empty_corpus_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(tmp_path / "empty"))
    assert p.returncode == 2
    assert "no shards under" in p.stderr


def test_fetch_sample_without_apt_says_what_to_do(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    p = yunque("--home", str(tmp_path / "home"), "fetch-sample", env={"PATH": str(bindir)})
    assert p.returncode == 2
    assert "apt-get" in p.stderr and "--corpus" in p.stderr


def test_vocabulary_too_large_for_the_corpus_is_a_clear_error(tmp_path):
    """The `tiny` preset's 4,096 tokens on a corpus of a few hundred words: the run stops at
    the tokenizer and says what to change, after the data stages succeeded."""
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(corpus))
    assert p.returncode == 1
    assert "tokenizer" in p.stderr and "lower tokenizer.vocab_size" in p.stderr, p.stderr
    assert "deduped_documents 2 shards" in p.stdout
    assert not (tmp_path / "home" / "data" / "token_shards").exists()


@pytest.mark.parametrize("args, message", [
    (["--overrides", '{"dedup": 5}'], "config key 'dedup' is a section"),
    (["--overrides", '{"langid.treshold": 0.5}'], "did you mean 'langid.threshold'?"),
    (["--overrides", '{"train.steps": "100"}'], "config key 'train.steps': Input should be a valid integer"),
    (["--overrides", "{not json"], "--overrides is not valid JSON"),
    (["--overrides", '{"train.lr": 1e400}'], "config key 'train.lr': inf is not a finite number"),
    (["--overrides", '{"train.warmup": 5000}'], "train.warmup (5000) is not shorter than train.steps"),
    (["--preset", "huge"], "unknown preset 'huge'"),
])
def test_bad_configuration_fails_fast_before_any_run(tmp_path, args, message):
    """One line naming the key, in well under 10 s, and no Dagster instance, run or output."""
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    home = tmp_path / "home"
    t0 = time.monotonic()
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), *args)
    assert time.monotonic() - t0 < 10
    assert p.returncode == 2 and message in p.stderr
    assert p.stderr.count("\n") == 1 and p.stdout == ""
    assert not home.exists()


def test_config_show_and_schema(tmp_path):
    p = yunque("config", "show", "--preset", "tiny", "--overrides", '{"langid.threshold": 0.5, "model": "small"}')
    assert p.returncode == 0, p.stderr
    tree = json.loads(p.stdout)
    assert tree["langid"]["threshold"] == 0.5 and tree["model"]["dim"] == 384 and tree["train"]["steps"] == 1600
    p = yunque("config", "schema")
    assert p.returncode == 0
    assert "TrainConfig" in json.loads(p.stdout)["$defs"]


def test_backfill_titles_are_what_dagster_accepts():
    from dagster._core.definitions.utils import is_valid_title_and_reason

    from orchestration.client import backfill_title

    for text in ("yunque run: everything", "yunque run: key:*_model", "yunque run: " + " or ".join(["key:sft_model"] * 9)):
        title = backfill_title(text)
        assert is_valid_title_and_reason(title) == (True, None), title
        assert title[:20] == text[:20].replace("*", "_")


def test_each_assets_line_is_chosen_by_its_name():
    """The summary of a materialization follows the asset's name, not a guess from its
    metadata keys (a post-training stage reports a vocabulary too); figures it lacks
    leave a plain word, never a crash at the end of a run."""
    from yunque.cli.summary import describe_asset

    post = {"step": 2, "eval_loss": 3.14159, "vocab_size": 512, "tokens_per_word": 1.7, "run_key": "k"}
    assert describe_asset("sft_model", post) == "step 2, loss 3.14"
    assert describe_asset("tokenizer", post) == "vocab 512, 1.7 tokens/word"
    assert describe_asset("base_model", {"step": 4, "loss": 5.5}) == "step 4, loss 5.500, no validation tokens"
    assert describe_asset("promoted_model", {"version": "3"}) == "materialized"
    assert describe_asset("filtered_documents", {"documents_in": 8, "documents_out": 6}) == "8->6"
    decon = {"passed": False, "contaminated_documents": 3, "training_documents_scanned": 2267,
             "sets_checked": ["domain_qa", "es_add2"]}
    assert describe_asset("eval_contamination", decon) == \
        "FAILED: 3 contaminated training documents of 2,267, sets domain_qa, es_add2"


def test_every_preset_flag_lists_the_presets_stages_config_builds():
    """`--preset` is declared once (add_preset_argument): each subcommand that takes it
    lists the names of stages.preset_names, which are the keys of stages.config.PRESETS."""
    import argparse

    from stages.config import PRESETS
    from yunque.cli.main import parser

    commands = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    nested = next(a for a in commands["config"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    listed = {}
    for name, sp in [*commands.items(), *((f"config {n}", s) for n, s in nested.items())]:
        for a in sp._actions:
            if "--preset" in a.option_strings:
                listed[name] = a.metavar or "{" + ",".join(a.choices) + "}"
    assert set(listed) == {"run", "eval", "calibrate", "config show"}
    assert set(listed.values()) == {"{" + ",".join(sorted(PRESETS)) + "}"}


def test_a_run_whose_assets_were_shown_as_they_landed_names_them_beside_its_failed_checks():
    """The line at a run's end leaves out what was printed while it ran; when that is
    everything but a check failed, it names the assets instead of a bare '-'."""
    from orchestration.follower import RunReport
    from yunque.cli.summary import run_line

    check = ("tokenizer", "tokens_per_word", False, False)
    report = RunReport("r", [], True, "SUCCESS", assets={"tokenizer": {"vocab_size": 512}}, checks=[check],
                       shown={"tokenizer"})
    assert run_line(report) == "[corpus] tokenizer (above)  ok (checks failed: tokenizer:tokens_per_word)"
    report.checks = []
    assert run_line(report) == ""  # nothing more to say
