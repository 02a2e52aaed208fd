"""Supervise a training command so that stopping it stops everything it started:
`python -m model.launch.supervise [--timeout S] [--grace S] -- torchrun ...`.

The command runs in its own process group: SIGINT or SIGTERM here, the timeout, or the
death of this process's parent send SIGTERM to the whole group, then SIGKILL after the
grace period. Dagster Pipes' SIGINT and torchrun's own forwarding would leave workers
stuck in a collective holding GPUs. Exit status: the command's own, 124 on timeout, 130
when interrupted. `Launch.command` builds the whole line, for one node or one of several.
Why, and the layers: docs/pretraining.md#the-launcher.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

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


# torch 2.13's c10d rendezvous shares one TCP store across rounds and caches its address
# on the surviving agent, so a node that is killed and started again waits forever for
# that address in the new round (measured: the rejoin hung until the join timeout). With
# sharing off, each round's rank-0 agent publishes a fresh store and the node rejoins.
RDZV_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
NODE_RANK_ENV = "YUNQUE_NODE_RANK"  # read by model.core.parallel: a node's ranks follow its configured rank


@dataclass
class Launch:
    """Where and how torchrun runs one node of a training program."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""  # host:port of node 0, which hosts the c10d rendezvous store
    rdzv_id: str = "yunque"
    max_restarts: int = 3  # several nodes: worker restarts after a failure (a peer died); one node: 0
    rdzv_timeout_s: int = 900  # how long agents wait for every node, at the start and after a failure
    rdzv_conf: str = ""  # more torchrun --rdzv-conf entries, e.g. "keep_alive_interval=1"
    timeout_s: float = 0
    grace_s: float = 10

    def command(self, module: str, *args: str, python: str = sys.executable) -> list[str]:
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(f"nnodes={self.nnodes} needs rdzv_endpoint (host:port of node 0)")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} is not in 0..{self.nnodes - 1}")
        torchrun = [python, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc_per_node}"]
        env: dict[str, str] = {}
        if self.nnodes == 1:
            # no torchrun restarts on one node: a refusal or a crash would only repeat, and
            # the asset's retry policy resumes from the last checkpoint anyway; its stores
            # listen on loopback only (model.launch.torchrun_local), not on every interface
            torchrun[2] = "model.launch.torchrun_local"
            torchrun.append("--standalone")
        else:
            # node 0 (the one running Dagster) hosts the rendezvous store, explicitly: on one
            # machine (tests) every agent's host name matches the endpoint
            conf = [f"join_timeout={self.rdzv_timeout_s}", f"is_host={int(self.node_rank == 0)}"]
            conf += [c for c in self.rdzv_conf.split(",") if c.strip()]
            # c10d ignores --node-rank (and says so): the rank that counts travels as NODE_RANK_ENV
            torchrun += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", "--rdzv-backend=c10d",
                         f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.rdzv_id}",
                         f"--max-restarts={self.max_restarts}", f"--rdzv-conf={','.join(conf)}"]
            env = {**RDZV_ENV, NODE_RANK_ENV: str(self.node_rank)}
        supervisor = [python, "-m", "model.launch.supervise", f"--timeout={self.timeout_s:g}", f"--grace={self.grace_s:g}"]
        supervisor += [f"--env={k}={v}" for k, v in env.items()]
        return [*supervisor, "--", *torchrun, "-m", module, *args]


def supervise(cmd: list[str], timeout: float = 0, grace: float = 10.0, env: dict[str, str] | None = None) -> int:
    stop = {"why": None}

    def on_signal(signum, _frame):
        stop["why"] = signal.Signals(signum).name

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509
                            env={**os.environ, **env} if env else None)
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
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in the command's environment")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given")
    if bad := [e for e in args.env if "=" not in e]:
        p.error(f"--env wants KEY=VALUE, got {bad}")
    return supervise(cmd, args.timeout, args.grace, dict(e.split("=", 1) for e in args.env))


if __name__ == "__main__":
    sys.exit(main())
