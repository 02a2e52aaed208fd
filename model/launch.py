"""Supervise a training command so that stopping it stops everything it started:
`python -m model.launch [--timeout S] [--grace S] -- torchrun ...`.

Dagster Pipes ends an external process by sending SIGINT to the process it started and
waiting a while. torchrun forwards a signal to its workers, but only if it gets to run
its handler; a worker stuck in a collective, or torchrun itself killed, leaves orphans
holding GPUs. So the command runs in its own session (process group): SIGINT or SIGTERM
here, or the timeout, sends SIGTERM to the whole group, then SIGKILL after the grace
period. The same happens when this process's parent dies (a SIGKILLed run worker), the
command dies with this process (PR_SET_PDEATHSIG), and the training workers watch their
parent (model.parallel), so no layer outlives the one above it.

Exit status: the command's own, 124 on timeout, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

TIMEOUT_EXIT = 124
INTERRUPT_EXIT = 130


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the process group kill still applies
        pass


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies still count for killpg(0); a group of only our reaped leader is gone
    return any(live_pgid(p) == pgid for p in os.listdir("/proc") if p.isdigit()) if os.path.isdir("/proc") else True


def live_pgid(pid: str) -> int | None:
    """The process group of a live process; None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[2]) if fields[0] != "Z" else None
    except (OSError, IndexError, ValueError):
        return None


def supervise(cmd: list[str], timeout: float = 0, grace: float = 10.0) -> int:
    stop = {"why": None}

    def on_signal(signum, _frame):
        stop["why"] = signal.Signals(signum).name

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509
    deadline = time.monotonic() + timeout if timeout > 0 else None
    parent = os.getppid()
    while proc.poll() is None:
        if stop["why"] is None and os.getppid() != parent:  # whoever launched us was killed
            stop["why"] = "parent exited"
        if stop["why"] is None and deadline is not None and time.monotonic() > deadline:
            stop["why"] = "timeout"
        if stop["why"] is not None:
            print(f"[launch] {stop['why']}: stopping the training process group {proc.pid}", file=sys.stderr,
                  flush=True)
            _kill_group(proc, grace)
            if stop["why"] == "timeout":
                print(f"[launch] the run exceeded its timeout of {timeout:.0f} s", file=sys.stderr, flush=True)
                return TIMEOUT_EXIT
            return INTERRUPT_EXIT
        time.sleep(0.2)
    if _group_alive(proc.pid):  # the leader exited but left children behind
        _kill_group(proc, grace)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float, default=0, help="seconds before the run is stopped (0: none)")
    p.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given")
    return supervise(cmd, args.timeout, args.grace)


if __name__ == "__main__":
    sys.exit(main())
