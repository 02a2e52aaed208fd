"""The training line of `yunque run`'s progress display, read from a training asset's own
records (the run itself executes in another process)."""

from __future__ import annotations

import json

from yunque.cli.follow import eta_text, training_status


def test_training_status_reads_the_last_step_and_its_eta(tmp_path):
    run = tmp_path / "base_model"
    run.mkdir()
    assert training_status(tmp_path, "base_model") is None  # nothing written yet
    (run / "train_config.json").write_text(json.dumps({"train": {"steps": 30, "start_step": 24}}))
    records = [{"event": "plan"}, {"event": "step", "step": 25, "eta_s": 90.0},
               {"event": "step", "step": 26, "eta_s": 75.5}]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + '\n{"event": "st')  # cut by a kill
    assert training_status(tmp_path, "base_model") == (26, 30, 75.5)
    (run / "metrics.jsonl").write_text(json.dumps({"event": "plan"}) + "\n")
    assert training_status(tmp_path, "base_model") == (0, 30, None)


def test_eta_reads_as_minutes_or_hours():
    assert eta_text(None) == "ETA after the first steps"
    assert eta_text(75.5) == "ETA 1m15s"
    assert eta_text(2 * 3600 + 5 * 60) == "ETA 2h05m"
