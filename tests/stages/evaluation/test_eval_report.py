"""The report's pieces without a model: repetition measures, the alarms on training
records, the table and its markdown."""

from __future__ import annotations

import pytest

from pipelines.tasks.textstats import distinct_n, repeated_ngram_rate, repetition
from stages.evaluation import report as eval_report


def test_repetition_measures():
    assert distinct_n([1, 2, 3, 4], 1) == 1.0
    assert distinct_n([1, 1, 1, 1], 1) == 0.25
    assert distinct_n([1, 2, 1, 2, 1], 2) == 0.5  # (1,2) (2,1) (1,2) (2,1)
    assert repeated_ngram_rate([1, 2, 3, 4, 5, 6], 4) == 0.0
    loop = [7, 8, 9] * 10
    assert repeated_ngram_rate(loop, 4) == pytest.approx(24 / 27)  # all but the first 3 four-grams repeat
    assert repeated_ngram_rate([1, 2], 4) == 0.0 and distinct_n([], 2) == 1.0
    assert repetition(loop)["distinct_1"] == 0.1


def _records(val: list[float], train: list[float], every: int = 10) -> list[dict]:
    recs = [{"event": "plan"}]
    for i, (v, t) in enumerate(zip(val, train), start=1):
        for s in range(every * (i - 1) + 1, every * i):
            recs.append({"event": "step", "step": s, "loss": t})
        recs.append({"event": "step", "step": every * i, "loss": t, "val_loss": v})
    return recs


def test_alarms_fire_on_rising_validation_and_memorising():
    healthy = eval_report.training_alarms(_records([5.0, 4.5, 4.2, 4.0], [5.1, 4.4, 4.0, 3.7]))
    assert not healthy["val_loss_rising"]["fired"] and not healthy["overfitting"]["fired"]
    rising = eval_report.training_alarms(_records([5.0, 4.0, 4.05, 4.2], [5.0, 3.9, 3.5, 3.0]))
    assert rising["val_loss_rising"]["fired"] and "minimum 4.0000 at step 20" in rising["val_loss_rising"]["detail"]
    assert rising["overfitting"]["fired"]
    flat = eval_report.training_alarms(_records([5.0, 4.0, 4.0, 3.999], [5.0, 3.9, 3.6, 3.2]))
    assert not flat["val_loss_rising"]["fired"] and flat["overfitting"]["fired"]
    few = eval_report.training_alarms(_records([5.0], [5.0]))
    assert not few["overfitting"]["fired"] and "too few" in few["overfitting"]["detail"]


def test_resumed_runs_count_each_step_once():
    recs = _records([5.0, 4.0, 3.9], [5.0, 4.0, 3.9])
    recs += [{"event": "plan"}, {"event": "step", "step": 20, "loss": 4.0, "val_loss": 4.0}]  # re-logged
    assert not eval_report.training_alarms(recs)["val_loss_rising"]["fired"]


def test_rising_validation_is_an_action_when_early_stopping_took_the_best():
    recs = _records([5.0, 4.0, 4.05, 4.2, 4.3], [5.0, 3.9, 3.5, 3.0, 2.8])
    stop = {"event": "early_stop", "step": 50, "best_step": 20, "best_val_loss": 4.0, "patience": 3}
    acted = eval_report.training_alarms([*recs, stop])["val_loss_rising"]
    assert not acted["fired"] and acted["action"] == "early_stop"
    assert "minimum 4.0000 at step 20" in acted["detail"]
    assert "early stopping took the best checkpoint, step 20 (stopped at step 50, patience 3)" in acted["detail"]
    # a stop from before a resume that trained on (a larger patience) is not this run's end
    more = [*recs, {**stop, "step": 40}, {"event": "step", "step": 60, "loss": 2.7, "val_loss": 4.4}]
    assert eval_report.training_alarms(more)["val_loss_rising"]["fired"]


def test_repetition_alarm_and_report():
    row = {"step": 100, "seed": 7, "checkpoint": "/x", "val_loss": 3.8, "val_ppl": 44.7, "val_bpb": 1.29, "parameters": 1000,
           "math_set": "es_add2", "math_accuracy": 0.25, "math_problems": 4, "distinct_2": 0.9, "repeat_4_max": 0.8,
           "samples": [{"prompt": "Hola", "completion": "a b a b", "tokens": 4, "distinct_1": 0.5,
                        "distinct_2": 0.67, "repeat_4": 0.8}],
           "math": {"es_add2": {"accuracy": 0.25, "problems": 4, "correct": 1, "format_rate": 0.5,
                                "examples": [{"question": "¿2 + 2?", "completion": "<answer>4</answer>",
                                              "predicted": 4.0, "expected": 4, "correct": True}]}}}
    report = eval_report.build({"base_model": row}, {"base_model": _records([5, 4], [5, 4])}, 3, 0.5)
    assert report["alarms"]["base_model"]["repetition"]["fired"]
    assert report["table"][0]["format_rate"] == 0.5 and report["table"][0]["stage"] == "base_model"
    md = eval_report.markdown(report)
    assert "| base_model | 100 | 7 | 3.8 |" in md and "**FIRED** base_model repetition" in md
    assert "25.0% of 4" in md


def test_domain_qa_columns():
    row = {"step": 5, "checkpoint": "/x", "val_loss": 3.0, "domain_qa_nll": 2.5, "domain_qa_ppl": 12.18,
           "domain_qa_pairs": 7, "samples": [], "math": {}}
    report = eval_report.build({"sft_model": row}, {}, 3, 0.5)
    assert report["table"][0]["domain_qa_nll"] == 2.5 and report["table"][0]["domain_qa_ppl"] == 12.18
    md = eval_report.markdown(report)
    assert "| domain_qa_nll | domain_qa_ppl |" in md and "| 2.5 | 12.18 |" in md
    assert "reference answers to 7 held-out questions" in md
    no_pairs = eval_report.markdown(eval_report.build({"base_model": {**row, "domain_qa_pairs": 0}}, {}, 3, 0.5))
    assert "no held-out question-answer pairs" in no_pairs
