"""The Dagster daemon that `yunque run` and `yunque ui` start when none serves the
instance yet: Dagster's own `dagster-daemon run` over this code location, with one change.

Dagster's backfill daemon wakes every 30 seconds (a module constant, not an instance
setting), and a backfill of the whole graph advances one dependency level per wake-up:
about seven levels, so up to three and a half idle minutes per `yunque run`. Our daemon
wakes every YUNQUE_DAEMON_INTERVAL seconds (default 5). A daemon you run yourself
(`dagster dev`, `dagster-daemon run`, a Kubernetes deployment) keeps Dagster's 30 s and
works the same, only slower to move from one level to the next.

The daemon of `yunque run` serves that command's backfill and nothing else: it runs the
backfill, run queue and run monitoring daemons, not the sensors, schedules and automation
(YUNQUE_DAEMON_SCOPE=backfills). Otherwise the automation would start runs outside the
command's selection (a tokenizer after `--select '*deduped_documents'`), which the
command's exit would then leave failed. `yunque ui` starts every daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

# A heartbeat younger than this means a daemon is serving the instance (Dagster's own
# liveness tolerance is 300 s; a daemon beats every 30 s).
FRESH_S = 90
CODE_LOCATION = ["-m", "assets.definitions"]
# What a daemon scoped to backfills leaves out: everything that starts runs of its own accord.
NOT_FOR_BACKFILLS = {"SENSOR", "SCHEDULER", "ASSET", "FRESHNESS"}


def serving(instance: dg.DagsterInstance) -> bool:
    """Does a live daemon process this instance's backfills?"""
    beat = instance.get_daemon_heartbeats().get("BACKFILL")
    return beat is not None and time.time() - beat.timestamp < FRESH_S


def start(log: Path, env: dict[str, str] | None = None, backfills_only: bool = False) -> subprocess.Popen:
    """Our daemon as a child process in its own session (so that Ctrl-C in the terminal
    reaches the CLI, which then stops it in order), its output in `log`; with
    `backfills_only`, without the daemons that start runs of their own accord."""
    log.parent.mkdir(parents=True, exist_ok=True)
    scope = {"YUNQUE_DAEMON_SCOPE": "backfills" if backfills_only else "all"}
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, "-m", "assets.daemon", "run", *CODE_LOCATION],
                                env={**os.environ, **(env or {}), **scope}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_serving(instance: dg.DagsterInstance, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.time() + timeout_s
    while not serving(instance):
        if proc.poll() is not None:
            raise RuntimeError(f"the Dagster daemon exited with code {proc.returncode}; its log: {log}")
        if time.time() > deadline:
            raise RuntimeError(f"the Dagster daemon did not start within {timeout_s:.0f} s; its log: {log}")
        time.sleep(1)


def stop(proc: subprocess.Popen, instance: dg.DagsterInstance | None = None, grace_s: float = 30) -> None:
    """SIGINT, as Ctrl-C would: the daemon finishes its iteration and stops its code servers.
    With `instance`, its heartbeats go too (`forget`)."""
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if instance is not None:
        forget(instance)


def forget(instance: dg.DagsterInstance) -> None:
    """Delete the heartbeats of a daemon we stopped. A daemon leaves its last heartbeat
    behind, so for FRESH_S the next `yunque run` would take it for a live one and wait on
    a backfill nobody plans (seen: a second `yunque run` right after a first one, on one
    Postgres instance). Only a daemon we started is forgotten, and we start one only when
    no other serves; another daemon beats again within 30 s."""
    instance.wipe_daemon_heartbeats()


def main() -> None:
    from dagster._daemon import controller
    from dagster._daemon.cli import main as daemon_main

    from stages.env import apply

    apply()
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = int(os.environ.get("YUNQUE_DAEMON_INTERVAL", "5"))
    if os.environ.get("YUNQUE_DAEMON_SCOPE") == "backfills":
        # dagster-daemon runs what the instance requires; this process requires less
        required = dg.DagsterInstance.get_required_daemon_types
        dg.DagsterInstance.get_required_daemon_types = lambda self: [  # type: ignore[method-assign]
            t for t in required(self) if t not in NOT_FOR_BACKFILLS]
    sys.argv[0] = "dagster-daemon"
    daemon_main()


if __name__ == "__main__":
    main()
