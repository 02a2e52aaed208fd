"""`yunque calibrate`, then adopting its proposal: the tree is built with the proposal's
thresholds written in, `yunque config show` prints them, and `yunque run` filters with
them."""

from __future__ import annotations

import dataclasses
import json
import re

from pipelines.data.calibrate import apply_thresholds
from pipelines.data.corpus import list_shards, open_corpus
from stages.config import preset
from stages.data.filter_profile import filters_key, load_proposal
from stages.data.ingest import clean_stage, read_stage
from stages.settings import tree
from stages.store.outputs import DataStore
from tests.pipelines.data.filter_cases import mixed_documents
from tests.support.cli import yunque
from tests.support.factory import write_two_shards


def test_a_proposal_adopted_by_id_is_in_the_tree_and_in_the_filter_stage(tmp_path):
    home, corpus = tmp_path / "home", tmp_path / "corpus"
    write_two_shards(corpus)
    mixed = corpus / "mezcla"  # the rules' metrics spread wide: a proposal that moves thresholds
    mixed.mkdir()
    for i, text in enumerate(mixed_documents(seed=5, count=150)):
        (mixed / f"doc{i}.txt").write_text(text, encoding="utf-8")
    store, cfg = DataStore(home), preset("tiny")
    fs, root = open_corpus(str(corpus))
    shards = list_shards(fs, root)
    for info in shards:
        read_stage(store, fs, root, info, cfg)
        clean_stage(store, info.key, cfg)

    out = yunque("--home", str(home), "calibrate", "--preset", "tiny", "--tail", "0.2")
    assert out.returncode == 0, out.stderr
    adopt = json.loads(re.search(r"adopt it:  --overrides '(.*)'", out.stdout).group(1))
    pid = adopt["filters.calibration"]
    thresholds = load_proposal(store, pid).thresholds()
    expected = apply_thresholds(cfg.filters, thresholds)
    assert filters_key(expected) != filters_key(cfg.filters)  # the proposal changes something

    shown = yunque("--home", str(home), "config", "show", "--preset", "tiny", "--overrides", json.dumps(adopt))
    assert shown.returncode == 0, shown.stderr
    filters = json.loads(shown.stdout)["filters"]
    assert filters["calibration"] == pid
    assert filters == json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(expected, calibration=pid))))
    # another home does not hold the proposal: one line naming the id and where it looked
    other = yunque("--home", str(tmp_path / "other"), "config", "show", "--preset", "tiny",
                   "--overrides", json.dumps(adopt))
    assert other.returncode == 2 and f"filters.calibration {pid!r}: no calibration proposal at" in other.stderr

    # the run: its tree carries the thresholds, and filtered_documents records them
    run = yunque("--home", str(home), "run", "--corpus", str(corpus), "--preset", "tiny", "--language", "es",
                 "--select", "key:filtered_documents", "--overrides", json.dumps(adopt))
    assert run.returncode == 0, run.stdout + run.stderr
    for info in shards:
        profile = store.manifest("filtered_documents", info.key)["stats"]["extra"]["filter_profile"]
        assert profile == {"profile": "docs", "calibration": pid, "language": "es", "filters_key": filters_key(expected)}
    assert tree(str(home), "tiny", {**adopt, "language": "es"}).filters == dataclasses.replace(expected, calibration=pid)
