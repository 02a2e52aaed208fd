"""Driving `yunque run` into a fault and watching what it leaves: the processes started for
an instance, the run workers and the daemon, waiting with a deadline, the outputs row by
row, and a fault or a 20 s outage in the middle of a run (tests/orchestration/test_faults.py,
tests/yunque/test_outages.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

SELECT = "*minhash_signatures"


def ours(dagster_home: Path) -> list[psutil.Process]:
    """The live processes started for this instance: the daemon, its code servers, the
    run workers and their helpers (all inherit DAGSTER_HOME)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE \
                    and p.environ().get("DAGSTER_HOME") == str(dagster_home):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


def start_run(home: Path, corpus: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(corpus),
                             "--select", SELECT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def run_worker(dagster_home: Path) -> list[psutil.Process]:
    """The process executing a run (spawned by the code server)."""
    return [p for p in ours(dagster_home) if "spawn_main" in " ".join(p.cmdline())]


def daemon_processes(dagster_home: Path) -> list[psutil.Process]:
    return [p for p in ours(dagster_home) if "orchestration.daemon" in " ".join(p.cmdline())]


def rerun(home: Path, corpus: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(corpus),
                           "--select", SELECT], capture_output=True, text=True, timeout=600, check=False)


def outputs(home: Path) -> dict[str, list[dict]]:
    """Every parquet output under the home's data (kept, rejected, signatures), row by row
    (a NaN as a string: a filter's "not measured" NaN equals the other run's)."""
    import math

    import pyarrow.parquet as pq

    def row(r: dict) -> dict:
        return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}

    return {str(f.relative_to(home / "data")): [row(r) for r in pq.read_table(f).to_pylist()]
            for f in sorted((home / "data").rglob("*.parquet"))}


def open_instance(dagster_home: Path, monkeypatch):
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home)))


def fault_mid_run(cmd: list[str], dagster_home: Path, fault, env: dict | None = None) -> tuple[int, str]:
    """Run `cmd` (a `yunque run`) and, once a run works, `fault()`; (status, output)."""
    cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, env=env)
    try:
        wait(lambda: run_worker(dagster_home), 180, "a run worker started")
        fault()
        out, _ = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    return cli.returncode, out


def outage_mid_run(cmd: list[str], dagster_home: Path, stop, start, env: dict | None = None) -> None:
    """Run `cmd` (a `yunque run`); once a run works, `stop()` a service, wait 20 s and
    `start()` it again: the command must end with status 0 and leave nothing running."""
    def outage() -> None:
        stop()
        time.sleep(20)
        start()
    code, out = fault_mid_run(cmd, dagster_home, outage, env)
    assert code == 0, out
    assert "0 failed" in out, out
    wait(lambda: not ours(dagster_home) or None, 60,
          f"our processes gone: {[' '.join(p.cmdline()) for p in ours(dagster_home)]}")


def instance_of(home: Path):
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    try:
        return DagsterInstance.from_ref(InstanceRef.from_dir(str(home / "dagster")))
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = saved
