"""model.launch.supervise: stopping the supervisor stops every process under it (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import REPO

# a parent that starts a child that ignores SIGTERM (so only SIGKILL ends it), both writing their pids
TREE = """
import os, signal, subprocess, sys, time
out = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    f"open({out!r} + '/child', 'w').write(str(os.getpid())); time.sleep(600)"])
open(out + "/parent", "w").write(str(os.getpid()))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(path: Path, seconds: float = 20) -> int:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return int(path.read_text())


def _start(tmp_path: Path, *flags: str) -> subprocess.Popen:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    return subprocess.Popen([sys.executable, "-m", "model.launch.supervise", *flags, "--grace", "1", "--",
                             sys.executable, str(script), str(tmp_path)], cwd=REPO)


def test_interrupt_kills_the_whole_tree(tmp_path):
    sup = _start(tmp_path)
    pids = [_wait_for(tmp_path / "parent"), _wait_for(tmp_path / "child")]
    assert all(_alive(p) for p in pids)
    sup.send_signal(signal.SIGINT)  # what Dagster Pipes sends on cancellation
    assert sup.wait(timeout=20) == 130
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "a process outlived the supervisor"


def test_timeout_stops_the_run(tmp_path):
    sup = _start(tmp_path, "--timeout", "2")
    child = _wait_for(tmp_path / "child")
    assert sup.wait(timeout=30) == 124
    time.sleep(0.5)
    assert not _alive(child)


def test_exit_code_passes_through(tmp_path):
    rc = subprocess.run([sys.executable, "-m", "model.launch.supervise", "--", sys.executable, "-c", "raise SystemExit(7)"],
                        check=False, cwd=REPO, env={**os.environ}).returncode
    assert rc == 7


# two gloo workers that meet and then wait, so that the stores can be looked at
MEET = """
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
open(sys.argv[1] + f"/rank{dist.get_rank()}", "w").write(str(int(t.item())))
time.sleep(600)
"""


def test_one_node_torchrun_listens_on_loopback_only(tmp_path):
    """The launch line for one node (what every training runs on one machine): its
    rendezvous and process-group stores accept connections on 127.0.0.1 only, and the
    workers still meet through them."""
    import psutil

    from model.launch.supervise import Launch

    (tmp_path / "meet.py").write_text(MEET)
    repo = REPO
    proc = subprocess.Popen(Launch(nproc_per_node=2).command("meet", str(tmp_path)), cwd=repo, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])})
    try:
        assert _wait_for(tmp_path / "rank0", 120) == 2 and _wait_for(tmp_path / "rank1", 30) == 2
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        listening = [c.laddr for p in tree for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert len(listening) >= 2, listening  # the rendezvous store and the workers' store
        assert all(addr.ip == "127.0.0.1" for addr in listening), listening
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
