"""The Dagster daemon that `yunque run` and `yunque ui` start when none serves the
instance yet: Dagster's own `dagster-daemon run` over this code location, with one change.

Its backfill loop wakes every YUNQUE_DAEMON_INTERVAL seconds (5), not Dagster's fixed 30:
a backfill advances one dependency level per wake-up, and 30 s cost up to three and a half
idle minutes per `yunque run`; and sooner on news (`orchestration.wakeups`). For `yunque
run` it runs the backfill, queue and monitoring daemons only (YUNQUE_DAEMON_SCOPE=backfills).
It dies with the command that started it, cancelling that command's backfills, and a
heartbeat of ours whose process is gone no longer counts. docs/deploy.md#the-daemon-ours-or-yours.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import dagster as dg

# A heartbeat younger than this means a daemon is serving the instance (Dagster's own
# liveness tolerance is 300 s; a daemon beats every 30 s).
FRESH_S = 90
CODE_LOCATION = ["-m", "assets.definitions"]
# What a daemon scoped to backfills leaves out: everything that starts runs of its own accord.
NOT_FOR_BACKFILLS = {"SENSOR", "SCHEDULER", "ASSET", "FRESHNESS"}


# How often the daemon looks for its parent, and how long its runs get to stop after a
# SIGINT before the rest of its process group is killed.
WATCH_S = 1.0
STOP_GRACE_S = 30.0


def _records(instance: dg.DagsterInstance) -> Path:
    return Path(instance.root_directory) / "daemons"


def _alive(record: dict) -> bool:
    """Is the process a record names still the one that wrote it (not a reused pid)?"""
    import psutil

    try:
        return abs(psutil.Process(record["pid"]).create_time() - record["started"]) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def serving(instance: dg.DagsterInstance) -> bool:
    """Does a live daemon process this instance's backfills? A fresh heartbeat from a
    daemon of ours whose process on this host is gone (a crash, kill -9) does not count,
    and is forgotten: the next command must start a daemon, not wait on a dead one."""
    beat = instance.get_daemon_heartbeats().get("BACKFILL")
    if beat is None or time.time() - beat.timestamp >= FRESH_S:
        return False
    path = _records(instance) / f"{beat.daemon_id}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return True  # not one of ours (dagster dev, dagster-daemon): its heartbeat is all we know
    if record.get("host") != socket.gethostname() or _alive(record):
        return True
    forget(instance)
    path.unlink(missing_ok=True)
    return False


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that lands inside the block and raise it as KeyboardInterrupt
    when the block ends. Around spawning a child and keeping its handle: raised inside
    Popen, it left a child nobody would stop (a webserver outliving `yunque ui`, seen in
    CI). Outside the main thread, where no handler can be set, it holds nothing."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job: Ctrl-C is not ours to raise
        yield
        return
    held: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, _: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if held:
        raise KeyboardInterrupt


def start(log: Path, env: dict[str, str] | None = None, backfills_only: bool = False) -> subprocess.Popen:
    """Our daemon as a child process in its own session (so that Ctrl-C in the terminal
    reaches the CLI, which then stops it in order), its output in `log`; with
    `backfills_only`, without the daemons that start runs of their own accord. It stops by
    itself when this process is gone."""
    log.parent.mkdir(parents=True, exist_ok=True)
    scope = {"YUNQUE_DAEMON_SCOPE": "backfills" if backfills_only else "all",
             "YUNQUE_DAEMON_PARENT": str(os.getpid())}
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, "-m", "orchestration.daemon", "run", *CODE_LOCATION],
                                env={**os.environ, **(env or {}), **scope}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _timing():
    """The timing this process' code servers load (`stages.store.home.timing`)."""
    from stages.store import home
    from stages.store.location import home_url

    return home.timing(home_url())


def serving_record(instance: dg.DagsterInstance) -> dict | None:
    """The record of the daemon of ours whose heartbeat is fresh (pid, host, scope: "all"
    or "backfills", timing: what its code servers loaded), or None: no daemon serves, or
    one we did not start (`dagster dev`, `dagster-daemon run`)."""
    beat = instance.get_daemon_heartbeats().get("BACKFILL")
    if beat is None or time.time() - beat.timestamp >= FRESH_S:
        return None
    try:
        return json.loads((_records(instance) / f"{beat.daemon_id}.json").read_text())
    except (OSError, ValueError):
        return None


def start_unless_serving(instance: dg.DagsterInstance, log: Path, backfills_only: bool = False,
                         env: dict[str, str] | None = None) -> subprocess.Popen | None:
    """Start our daemon (`start`, `env` added to its environment) and wait until it serves,
    unless one serves already: then None. Under the home's "daemon" lock, so that two
    commands started together never both start one (two daemons on one instance both launch
    the queued runs, and each one's run monitor fails the other's)."""
    from orchestration.client import home_lock

    with home_lock("daemon"):
        if serving(instance):
            return None
        proc = None
        try:
            with interrupts_held():
                proc = start(log, env=env, backfills_only=backfills_only)
            wait_serving(instance, proc, log)
        except BaseException:  # Ctrl-C while it starts, or it never served: it must not run on
            if proc is not None:
                stop(proc, instance)
            raise
        return proc


def wait_serving(instance: dg.DagsterInstance, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.time() + timeout_s
    while not serving(instance):
        if proc.poll() is not None:
            raise RuntimeError(f"the Dagster daemon exited with code {proc.returncode}; its log: {log}")
        if time.time() > deadline:
            raise RuntimeError(f"the Dagster daemon did not start within {timeout_s:.0f} s; its log: {log}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen, instance: dg.DagsterInstance | None = None, grace_s: float = 30,
         idle: bool = False) -> None:
    """SIGINT, as Ctrl-C would: the daemon finishes its iteration and stops its code servers.
    With `instance`, its heartbeats go too (`forget`). `idle`: no run of it is in flight, so
    once the daemon is gone its code servers get SIGTERM (they took 2 s to follow the
    SIGINT, 1.2 s this way: at the end of every `yunque run`)."""
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGCONT)  # a stopped daemon (SIGSTOP) handles the SIGINT only once it runs
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if idle:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    empty_group(proc.pid)
    if instance is not None:
        forget(instance)


def empty_group(pgid: int, grace_s: float = 10) -> None:
    """What is left of a process group once its leader exited (the daemon's code servers
    and their run workers; the webserver's code server) gets `grace_s` to end, then
    SIGKILL. Seen on a full disk: a code server outlived its daemon for minutes, and the
    run it still claimed to serve kept the next command waiting."""
    import signal

    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, 0)  # any process left in the group?
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            return
        time.sleep(0.2)


def forget(instance: dg.DagsterInstance) -> None:
    """Delete the heartbeats of a daemon we stopped. A daemon leaves its last heartbeat
    behind, so for FRESH_S the next `yunque run` would take it for a live one and wait on
    a backfill nobody plans (seen: a second `yunque run` right after a first one, on one
    Postgres instance). Only a daemon we started is forgotten, and we start one only when
    no other serves; another daemon beats again within 30 s."""
    instance.wipe_daemon_heartbeats()


def _record_self() -> None:
    """Write `daemons/<id>.json` (pid, host, start time) once the controller has its id,
    the one its heartbeats carry (the controller's private `_daemon_uuid`, pinned Dagster),
    and delete the records of this host's daemons that are gone. A record outlives its
    daemon on purpose: the heartbeat does too, and the record is what says it is dead."""
    import psutil
    from dagster._daemon import controller

    init = controller.DagsterDaemonController.__init__

    def recording_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        folder = _records(self._instance)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.json"):
            try:
                record = json.loads(old.read_text())
            except (OSError, ValueError):
                continue
            if record.get("host") == socket.gethostname() and not _alive(record):
                old.unlink(missing_ok=True)
        me = psutil.Process()
        record = {"pid": me.pid, "host": socket.gethostname(), "started": me.create_time(),
                  "scope": os.environ.get("YUNQUE_DAEMON_SCOPE", "all"), "timing": asdict(_timing())}
        (folder / f"{self._daemon_uuid}.json").write_text(json.dumps(record))

    controller.DagsterDaemonController.__init__ = recording_init  # type: ignore[method-assign]


def _orphaned(parent: int) -> None:
    """The command that started us is gone: cancel the backfills it submitted (nobody
    follows them, and the next command plans what is left), let the runs it did not
    submit (a UI backfill we were serving) finish, then stop as Ctrl-C would: SIGINT to
    our process group (the daemon finishes its iteration, the command's runs record that
    they were interrupted), SIGKILL to what is left after STOP_GRACE_S."""
    from orchestration import client

    print(f"yunque: the command that started this daemon (pid {parent}) is gone; cancelling its backfills and "
          "stopping", flush=True)  # into daemon.log
    try:
        instance = dg.DagsterInstance.get()
        mine = [b.backfill_id for b in instance.get_backfills()
                if b.tags.get(client.CLIENT_TAG) == client.client_id(parent)]
        for backfill_id in mine:
            client.cancel(instance, backfill_id, no_daemon=True)
        while others := client.runs_in_flight(instance, mine):
            print(f"yunque: waiting for {len(others)} runs that command did not submit", flush=True)
            time.sleep(10)
    finally:
        os.killpg(os.getpgid(0), signal.SIGINT)
        time.sleep(STOP_GRACE_S)
        os.killpg(os.getpgid(0), signal.SIGKILL)


def _watch(parent: int) -> None:
    """Until our parent process is gone (we were re-parented); a daemon thread."""
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    _orphaned(parent)


def main() -> None:
    from dagster._daemon import controller
    from dagster._daemon.cli import main as daemon_main

    from orchestration import wakeups
    from resources.telemetry import apply

    apply()
    _record_self()
    parent = int(os.environ.get("YUNQUE_DAEMON_PARENT", "0"))
    if parent:
        threading.Thread(target=_watch, args=(parent,), name="yunque-parent-watch", daemon=True).start()
    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = int(os.environ.get("YUNQUE_DAEMON_INTERVAL", "5"))
    wakeups.install()
    if os.environ.get("YUNQUE_DAEMON_SCOPE") == "backfills":
        # dagster-daemon runs what the instance requires; this process requires less
        required = dg.DagsterInstance.get_required_daemon_types
        dg.DagsterInstance.get_required_daemon_types = lambda self: [  # type: ignore[method-assign]
            t for t in required(self) if t not in NOT_FOR_BACKFILLS]
    sys.argv[0] = "dagster-daemon"
    daemon_main()


if __name__ == "__main__":
    main()
