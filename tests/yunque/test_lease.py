"""One configuration per home at a time (`yunque.cli.lease`): a command whose
configuration differs from a running one's refuses in one line before it writes
anything; the same configuration runs beside it; a dead command's lease is stale."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.factory import SMALL_RUN, write_two_shards
from tests.support.ui_server import REPO, YUNQUE, ui_env, wait_for
from yunque.cli import lease

HOLDER = """
import os, sys, time
os.environ["DAGSTER_HOME"] = sys.argv[1]
from yunque.cli import lease
with lease.held(lease.Lease("corpus", sys.argv[2], "c-" + sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(dagster_home: Path, preset: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(dagster_home), preset], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_another_configuration_is_refused_the_same_one_runs_beside(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    holder = _holder(tmp_path, "tiny")
    try:
        with pytest.raises(lease.HomeBusy) as e, lease.held(lease.Lease("corpus", "smoke", "c-smoke")):
            pass
        assert str(e.value).startswith(f"`yunque run` (pid {holder.pid}) is running on this home with another "
                                       "configuration (preset tiny, configuration c-tiny, corpus corpus; this command: "
                                       "preset smoke, configuration c-smoke")
        assert str(e.value).endswith("wait for it to end, or give this command another home (--home DIR)")
        with lease.held(lease.Lease("corpus", "tiny", "c-tiny")):  # the same work: two selections at once
            assert len(list((tmp_path / "commands").glob("*.json"))) == 2
        assert len(list((tmp_path / "commands").glob("*.json"))) == 1
    finally:
        holder.kill()
        holder.wait()
    # killed without a word: its lease is unlocked, so stale, and removed by the next command
    with lease.held(lease.Lease("corpus", "smoke", "c-smoke")):
        assert [p.name for p in (tmp_path / "commands").glob("*.json")] == [f"{os.getpid()}.json"]


def test_two_presets_at_once_through_the_cli(tmp_path):
    """`yunque run --preset tiny` and, while it runs, the same with `--preset smoke`: the
    second refuses in one line (exit 3), the home's settings stay tiny's, and the first
    ends describing its own outputs."""
    corpus = tmp_path / "corpus"
    write_two_shards(corpus)
    home = tmp_path / "home"
    first = subprocess.Popen([YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--select",
                              "*token_shards", "--preset", "tiny", "--overrides", SMALL_RUN], cwd=REPO,
                             env=ui_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the first command's lease", lambda: list((home / "dagster" / "commands").glob("*.json")), 120, 0.2)
        t0 = time.monotonic()
        second = subprocess.run([YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--select",
                                 "*token_shards", "--preset", "smoke"], cwd=REPO, env=ui_env(home),
                                capture_output=True, text=True, timeout=120, check=False)
        assert time.monotonic() - t0 < 30
        assert second.returncode == 3, second.stdout + second.stderr
        assert second.stderr.count("\n") == 1 and second.stdout == ""
        assert second.stderr.startswith(f"yunque run: `yunque run` (pid {first.pid}) is running on this home with "
                                        "another configuration (preset tiny, ")
        assert json.loads((home / "yunque.json").read_text())["preset"] == "tiny"
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGINT)
            first.wait(60)
    assert first.returncode == 0, out[-3000:] + err[-3000:]
    assert "vocabulary 512" in out and "tiny preset" in out
    assert json.loads((home / "yunque.json").read_text())["preset"] == "tiny"
    assert not list((home / "dagster" / "commands").glob("*.json"))
