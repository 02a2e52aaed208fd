"""`yunque node --home H --node-rank N`: join, from another machine, a training run that
node 0 (the machine running Dagster, with YUNQUE_NNODES > 1) starts.

It waits for node 0's next launch of the asset (a new `data/<asset>/launch.json` in this
node's copy of the home, model.launch.spec), or with `--now` joins the launch described
there now (a node restarted during a run). It writes the run's config with this home's
paths in place of node 0's, then runs the same supervisor and torchrun as node 0 with
this node's rank (model.launch.supervise), and exits with their status.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from model.launch.spec import SPEC_FILE, LaunchSpec, node_config, read_spec
from model.launch.supervise import Launch
from resources.telemetry import TELEMETRY_OFF
from stages.store.location import home_url
from stages.store.outputs import DataStore


def _say(message: str) -> None:
    print(message, flush=True)


def wait_for_spec(run_dir: Path, now: bool, timeout_s: float, poll_s: float = 1.0,
                  say: Callable[[str], None] = _say, refresh: Callable[[], None] = lambda: None) -> LaunchSpec | None:
    """The launch to join: the current spec (`now`), else the first one written after we
    started (told apart by its launch id, not by clocks that nodes may disagree on).
    `refresh` brings the spec from the store first (a home on an object store)."""
    refresh()
    current = read_spec(run_dir)
    if now:
        return current
    seen = current.launch_id if current else None
    say(f"waiting up to {timeout_s:.0f} s for node 0 to start {run_dir.name} on several nodes "
        f"(a new {run_dir / SPEC_FILE}); Ctrl-C to stop")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        refresh()
        spec = read_spec(run_dir)
        if spec is not None and spec.launch_id != seen:
            return spec
    return None


def _launch(spec: LaunchSpec, node_rank: int, endpoint: str | None) -> Launch:
    known = {f.name for f in fields(Launch)}
    settings = {k: v for k, v in spec.launch.items() if k in known}
    return Launch(**{**settings, "node_rank": node_rank, "rdzv_endpoint": endpoint or settings.get("rdzv_endpoint", "")})


def _missing_inputs(config: Path) -> list[str]:
    train = json.loads(config.read_text()).get("train", {})
    return [p for p in [*train.get("shards", []), train.get("tokenizer", "")] if p and not Path(p).exists()]


def _run(cmd: list[str], env: dict[str, str], grace_s: float) -> int:
    """The supervisor's status. Ctrl-C (or SIGTERM) reaches it too; give it time to stop
    its torchrun group (model.launch.supervise) rather than killing it first."""
    proc = subprocess.Popen(cmd, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=grace_s + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def cmd_node(args: argparse.Namespace) -> int:
    url = args.node_home or getattr(args, "home", None) or home_url()
    store = DataStore(url)  # a home on an object store: this node's local cache of it
    home = store.home
    run_dir = home / "data" / args.asset
    spec = wait_for_spec(run_dir, args.now, args.wait, refresh=lambda: store.fetch_file(args.asset, SPEC_FILE))
    if spec is None:
        if args.now:
            print(f"yunque node: no launch spec in {run_dir / SPEC_FILE}: node 0 writes it when {args.asset} starts "
                  "with YUNQUE_NNODES > 1 (is this node's --home a copy of node 0's home?)", file=sys.stderr)
        else:
            print(f"yunque node: node 0 started no new launch of {args.asset} within {args.wait:.0f} s (watched "
                  f"{run_dir / SPEC_FILE}). Start {args.asset} on node 0 with YUNQUE_NNODES > 1, or pass --now to "
                  "join the launch that spec describes (a node restarted during a run).", file=sys.stderr)
        return 2
    if not 1 <= args.node_rank < spec.nnodes:
        print(f"yunque node: --node-rank must be in 1..{spec.nnodes - 1} for this launch of {spec.nnodes} nodes "
              "(node 0 is the one running Dagster)", file=sys.stderr)
        return 2
    launch = _launch(spec, args.node_rank, args.rdzv_endpoint)
    config = node_config(spec, home, args.node_rank)
    store.inputs_of(json.loads(config.read_text()))  # from the store into this node's cache
    if missing := _missing_inputs(config):  # before torchrun: else every node fails and restarts on it
        print(f"yunque node: this node's home lacks the run's inputs {missing}: share node 0's home, or copy "
              f"its data/ (token_shards, tokenizer) to {home / 'data'}", file=sys.stderr)
        return 2
    cmd = launch.command(spec.module, "--config", str(config))
    print(f"node {args.node_rank} of {spec.nnodes}: joining {spec.asset} (launch {spec.launch_id[:8]}, written on "
          f"node 0 at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(spec.written_at))}), rendezvous at "
          f"{launch.rdzv_endpoint}; config {config}\n  {shlex.join(cmd)}", flush=True)
    return _run(cmd, {**os.environ, **TELEMETRY_OFF, **spec.env}, launch.grace_s)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", dest="node_home",
                   help="this node's copy of the home (a shared path, or its own copy; default: yunque --home, "
                        "$YUNQUE_HOME or ./.yunque)")
    p.add_argument("--node-rank", type=int, required=True, help="this node's rank, 1..nnodes-1 (node 0 runs Dagster)")
    p.add_argument("--rdzv-endpoint", help="host:port of node 0's rendezvous, when this node reaches it by "
                                           "another address than the launch spec says")
    p.add_argument("--asset", default="base_model", help="the training asset to join (default base_model)")
    p.add_argument("--now", action="store_true", help="join the launch the spec describes now (a node restarted "
                                                      "during a run) instead of waiting for node 0's next one")
    p.add_argument("--wait", type=float, default=3600.0, help="seconds to wait for node 0's next launch (default 3600)")
    p.set_defaults(fn=cmd_node)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    _arguments(subparsers.add_parser("node", help="join a training run on several nodes from another node",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


def main(argv: list[str] | None = None) -> int:
    """`python -m yunque.cli.node ...`: the same command without the rest of the CLI."""
    p = argparse.ArgumentParser(prog="yunque node", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
