"""Ratings as data: what a submission must hold, the durable append (a duplicate refused,
two writers on one folder, a torn line after a crash), and the training data made from
them (pipelines.feedback, stages.data.human_preferences, model.post.common.human_part)."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from pipelines.feedback import preferences, records
from pipelines.feedback.records import DuplicateFeedback, FeedbackError, FeedbackLog

Q = [{"role": "user", "content": "¿Cuánto es 2 más 3?"}]


def answer(model: str, text: str, version: str = "1") -> dict:
    return {"model": model, "version": version, "weights_sha256": model * 8, "text": text}


def rating(rid: str, kind: str = "compare", choice: str = "a", edited: str | None = None, texts=("5", "6")) -> dict:
    answers = [answer("champion", texts[0])] + ([answer("candidate", texts[1], "2")] if kind == "compare" else [])
    return {"id": rid, "kind": kind, "messages": Q, "answers": answers, "choice": choice, "edited": edited}


@pytest.mark.parametrize("change, says", [
    ({"kind": "vote"}, "kind"), ({"choice": "up"}, "choice"), ({"answers": []}, "answers"),
    ({"messages": [{"role": "assistant", "content": "hola"}]}, "end with the user's turn"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"), ({"id": "a b"}, "id"),
    ({"extra": 1}, "unknown keys"), ({"edited": 3}, "edited"),
])
def test_a_bad_submission_names_the_key(change, says):
    with pytest.raises(FeedbackError, match=None) as e:
        records.validate(rating("r1") | change)
    assert says in str(e.value)


def test_append_is_durable_refuses_duplicates_and_serves_two_writers(tmp_path):
    log = FeedbackLog(tmp_path)
    kept = log.append(rating("r1"))
    assert kept["time"].endswith("Z") and kept["format"] == 1 and kept["position"] == 1
    with pytest.raises(DuplicateFeedback) as dup:
        log.append(rating("r1", choice="b"))  # a resubmission after a lost reply
    assert dup.value.position == 1  # where the first one is: the page can still say which model holds it
    # another writer on the same folder (a second server): each sees the other's ids
    other = FeedbackLog(tmp_path)
    with pytest.raises(DuplicateFeedback):
        other.append(rating("r1"))
    assert other.append(rating("r2"))["position"] == 2
    with pytest.raises(DuplicateFeedback) as dup:
        log.append(rating("r2"))
    assert dup.value.position == 2
    assert [r["id"] for r in records.read(tmp_path).records] == ["r1", "r2"]


def _write_many(directory: str, prefix: str, n: int) -> None:
    log = FeedbackLog(directory)
    for i in range(n):
        log.append(rating(f"{prefix}{i}", texts=("x" * 3000, "y" * 3000)))  # lines longer than a pipe buffer


def test_two_processes_appending_at_once_interleave_whole_lines(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), p, 40)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    found = records.read(tmp_path)
    assert found.skipped == [] and len(found.records) == 80


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_clean(tmp_path):
    FeedbackLog(tmp_path).append(rating("r1"))
    with open(tmp_path / records.RATINGS_FILE, "a") as f:
        f.write('{"id": "r2", "kind": "comp')  # a writer killed mid-line: never confirmed
    log = FeedbackLog(tmp_path)
    log.append(rating("r3"))
    found = records.read(tmp_path)
    assert [r["id"] for r in found.records] == ["r1", "r3"]
    assert len(found.skipped) == 1 and ":2:" in found.skipped[0][1]


def test_ratings_become_pairs_and_conversations():
    data = preferences.convert([
        records.validate(rating("w", choice="b")),  # B wins: (6 over 5), and B's answer is SFT data
        records.validate(rating("e", choice="both_bad", edited="La respuesta es 5.")),  # edited over both
        records.validate(rating("t", choice="tie")),  # nothing to learn
        records.validate(rating("u", kind="rate", choice="up", texts=("5",))),
        records.validate(rating("d", kind="rate", choice="down", texts=("7",))),
        records.validate(rating("w2", choice="b")),  # the same pair again: kept once
    ])
    assert {(p["chosen"], p["rejected"]) for p in data.pairs} == {("6", "5"), ("La respuesta es 5.", "5"),
                                                                   ("La respuesta es 5.", "6")}
    assert [c["messages"][-1]["content"] for c in data.sft] == ["6", "La respuesta es 5.", "5"]
    assert all(c["messages"][:-1] == Q for c in data.sft)
    s = data.summary()
    assert s["records"]["compare:tie (nothing to learn)"] == 1 and s["records"]["rate:down (nothing to learn)"] == 1
    assert s["models"] == {"champion v1": 6, "candidate v2": 4}
    # the version is the records' content, not when they were read
    a = [records.validate(rating("w"), now=0), records.validate(rating("e", edited="x"), now=0)]
    b = [records.validate(rating("e", edited="x"), now=99), records.validate(rating("w"), now=99)]
    assert preferences.version(a) == preferences.version(b) != preferences.version(a[:1])


def test_the_stage_writes_the_conventional_formats_and_counts_new_ratings(tmp_path):
    from pipelines.tasks.post_data import read_preferences, read_sft
    from stages.data import human_preferences as hp
    from stages.store.outputs import DataStore

    store = DataStore(tmp_path / "home")
    assert hp.build(store)["version"] == hp.EMPTY and hp.for_stage(store, "dpo") is None
    log = FeedbackLog(hp.feedback_dir(store))
    log.append(rating("w", choice="a", edited="Son 5."))
    assert hp.waiting(store, 0) == {"ratings": 1, "trained": 0, "waiting": 1,
                                    "by_model": {"candidate v2": 1, "champion v1": 1}}
    s = hp.build(store)
    assert hp.waiting(store, 0)["waiting"] == 1  # read by the asset, in no model yet
    assert hp.waiting(store, 1)["waiting"] == 0 and s["ratings"] == 1 and s["pairs"] == 3 and s["sft"] == 1
    dpo, sft = hp.for_stage(store, "dpo"), hp.for_stage(store, "sft")
    assert dpo["version"] == s["version"] and dpo["examples"] == 3 and hp.for_stage(store, "ppo") is None
    pairs = read_preferences(dpo["path"])  # the readers every post-training stage uses
    # A won (5 over 6), and the edited answer beats both
    assert {(p.chosen, p.rejected) for p in pairs} == {("5", "6"), ("Son 5.", "5"), ("Son 5.", "6")}
    assert list(pairs[0].prompt) == Q
    assert read_sft(sft["path"])[0][-1] == {"role": "assistant", "content": "Son 5."}
    log.append(rating("x", choice="b"))
    assert hp.waiting(store, 1) == {"ratings": 2, "trained": 1, "waiting": 1,
                                    "by_model": {"candidate v2": 1, "champion v1": 1}}
    assert json.loads((store.dir(hp.HUMAN_PREFERENCES) / hp.SUMMARY_FILE).read_text())["ratings"] == 1


def test_the_human_weight_repeats_training_examples_never_held_out_ones():
    from model.post.common import human_part, weighted
    from model.post.config import DPOConfig

    items = list(range(20))
    assert weighted(items, 2.0, 0) == items * 2
    half = weighted(items, 0.5, 0)
    assert len(half) == 10 and set(half) <= set(items)
    train, held, plan = human_part(DPOConfig(heldout_fraction=0.1, human_weight=3.0), items)
    assert len(held) == 2 and not set(held) & set(train) and len(train) == 18 * 3
    assert plan == {"examples": 20, "train": 54, "heldout": 2, "weight": 3.0}
    assert human_part(DPOConfig(), []) == ([], [], {})
