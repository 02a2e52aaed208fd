"""The data plan (`stages.data.plan`): which data outputs are up to date, asked before
anything runs, on a real home the graph built. Every output is current after a run; a
changed shard, a changed setting or a damaged output makes exactly what depends on it
stale; and `yunque run` of an up-to-date selection starts no run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.support import REPO
from tests.support.factory import SMALL_RUN, add_shard
from yunque import env

SHARDS = ("uno", "dos", "tres")


@pytest.fixture()
def built(tmp_path, monkeypatch):
    from orchestration.runner import run_graph

    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    home = env.use_home(tmp_path / "home")
    root = tmp_path / "corpus"
    for i, name in enumerate(SHARDS):
        add_shard(root, name, seed=i, docs=4)
    summary = run_graph(str(root), select="*eval_contamination", overrides=SMALL_RUN)
    assert summary.ok, [r.error for r in summary.runs if not r.ok]
    return home, root


def _plan(home: Path, root: Path, overrides: dict | None = None):
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.plan import plan
    from stages.store.outputs import DataStore

    cfg = preset("tiny", {**json.loads(SMALL_RUN), **(overrides or {})})
    fs, base = open_corpus(str(root))
    return plan(DataStore(home), cfg, {s.key: s.fingerprint for s in list_shards(fs, base)})


def _stale(p) -> dict[str, set[str]]:
    """The corpus' stale outputs (human_preferences, from the chat page's ratings, apart)."""
    from stages.data.plan import PER_SHARD, WHOLE_CORPUS

    out = {a: set(SHARDS) - p.fresh_shards[a] for a in PER_SHARD}
    out |= {a: {"corpus"} for a in WHOLE_CORPUS if a not in p.fresh_assets and a != "human_preferences"}
    return {a: s for a, s in out.items() if s}


def test_everything_is_current_after_a_run_and_a_change_makes_its_dependants_stale(built):
    home, root = built
    assert _stale(_plan(home, root)) == {}

    # one shard's files change: its whole chain, the index and the learned quality model's
    # scores, and every shard's deduplicated
    # output and tokens (the index decides for all of them), and the decontamination of the
    # training split; not the tokenizer (trained once)
    (root / "dos" / "nuevo.txt").write_text("Otro documento más, con algunas palabras nuevas.", encoding="utf-8")
    changed = _stale(_plan(home, root))
    assert changed == {"raw_documents": {"dos"}, "clean_documents": {"dos"}, "filtered_documents": {"dos"},
                       "minhash_signatures": {"dos"}, "dedup_index": {"corpus"}, "quality_model": {"corpus"},
                       "deduped_documents": set(SHARDS), "token_shards": set(SHARDS),
                       "eval_contamination": {"corpus"}}
    (root / "dos" / "nuevo.txt").unlink()  # the listing as it was: current again
    assert _stale(_plan(home, root)) == {}

    # a setting of one stage: that stage and what follows
    dedup = _stale(_plan(home, root, {"dedup.seed": 2}))
    assert dedup.keys() == {"minhash_signatures", "dedup_index", "deduped_documents", "token_shards",
                            "eval_contamination"}
    assert _stale(_plan(home, root, {"tokenizer.vocab_size": 480})).keys() == {"tokenizer", "token_shards",
                                                                              "eval_contamination"}
    # an evaluation setting changes the sets looked up: the decontamination alone
    assert _stale(_plan(home, root, {"eval.math_problems": 7})) == {"eval_contamination": {"corpus"}}

    # a damaged output (its files gone) is not current
    (home / "data" / "token_shards" / "tres" / "train.bin").unlink()
    assert _stale(_plan(home, root)) == {"token_shards": {"tres"}, "eval_contamination": {"corpus"}}


def test_human_preferences_are_current_until_a_new_rating(tmp_path):
    from pipelines.feedback.records import FeedbackLog
    from stages.data import human_preferences as hp
    from stages.store.outputs import DataStore

    home, root = tmp_path / "home", tmp_path / "corpus"
    root.mkdir()
    store = DataStore(home)
    assert "human_preferences" not in _plan(home, root).fresh_assets  # never built
    hp.build(store)
    assert "human_preferences" in _plan(home, root).fresh_assets  # no ratings, and none since
    FeedbackLog(hp.feedback_dir(store)).append({
        "id": "r1", "kind": "rate", "messages": [{"role": "user", "content": "Hola"}], "choice": "up",
        "answers": [{"model": "champion", "version": "1", "weights_sha256": "a" * 64, "text": "Hola."}]})
    assert "human_preferences" not in _plan(home, root).fresh_assets
    assert hp.build(store)["cached"] is False and hp.build(store)["cached"] is True
    assert "human_preferences" in _plan(home, root).fresh_assets


def test_an_up_to_date_selection_starts_no_run(built):
    home, root = built
    instance = dg.DagsterInstance.get()
    runs = len(instance.get_runs())
    env_ = {k: v for k, v in os.environ.items() if not k.startswith("YUNQUE_")}
    env_ |= {"YUNQUE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    done = subprocess.run([sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(root),
                           "--select", "*eval_contamination", "--overrides", SMALL_RUN], cwd=REPO, env=env_,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nothing changed: no run started" in done.stdout
    assert "left out: 22 of 22 asset partitions" in done.stdout  # 6 per-shard assets x 3 shards + 4
    assert "starting a Dagster daemon" not in done.stdout
    assert len(instance.get_runs()) == runs
