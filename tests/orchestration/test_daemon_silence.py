"""A daemon that stops answering (SIGSTOP) under `yunque run`: one line every 30 s while
it is silent; when it answers again the command goes on (retrying once what was failed
from outside meanwhile); when it never does, one line and the resuming command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.support.factory import SMALL_RUN, write_two_shards
from tests.support.ui_server import REPO, YUNQUE, ui_env, wait_for


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("silence") / "corpus"
    write_two_shards(root)
    return root


def _start(home, corpus, **env: str) -> subprocess.Popen:
    return subprocess.Popen([YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--select", "*token_shards",
                             "--overrides", SMALL_RUN], cwd=REPO, env=ui_env(home, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _daemon_pid(home) -> int:
    def found():
        for path in (home / "dagster" / "daemons").glob("*.json"):
            pid = json.loads(path.read_text())["pid"]
            if psutil.pid_exists(pid):
                return pid
        return None
    return wait_for("the command's daemon", found, 120, 0.5)


def test_a_stopped_daemon_is_reported_and_the_run_goes_on_when_it_answers(corpus, tmp_path):
    home = tmp_path / "home"
    proc = _start(home, corpus)
    try:
        pid = _daemon_pid(home)
        time.sleep(3)  # let it launch the first runs
        os.kill(pid, signal.SIGSTOP)
        time.sleep(40)
        os.kill(pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.kill(pid, signal.SIGCONT)
            proc.kill()
    assert f"the Dagster daemon (pid {pid}) has not answered for 3" in err
    assert "; state: stopped (this command gives up at 300 s)" in err
    assert f"the Dagster daemon (pid {pid}) answers again after 4" in err
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert (home / "data" / "token_shards" / "foro" / "_manifest.json").exists()


def test_a_daemon_that_never_answers_ends_the_command_in_one_line(corpus, tmp_path):
    home = tmp_path / "home"
    proc = _start(home, corpus, YUNQUE_DAEMON_SILENCE_LIMIT="35")
    try:
        pid = _daemon_pid(home)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.kill(pid, signal.SIGCONT)
            proc.kill()
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    assert time.monotonic() - t0 < 120
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"yunque run: the Dagster daemon (pid {pid}) has not answered for 3")
    assert "(state: stopped): stopping it; its log: " in last and last.endswith("Run the same command again to resume.")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
