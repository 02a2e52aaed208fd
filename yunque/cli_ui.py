"""`yunque ui`: the Dagster UI (webserver) and the daemon over this home, in the
foreground; Ctrl-C stops both. The daemon is not started when one already serves the
instance (a `yunque run` in progress, say). It is what `dagster dev` does, without
`dagster dev`'s deprecation notice and with the home's own instance settings."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from yunque import env


def cmd_ui(args: argparse.Namespace) -> int:
    from assets import client, daemon

    home = env.use_home(args.home)
    instance = client.instance()
    logs = Path(instance.root_directory)
    procs: list[subprocess.Popen] = []
    try:
        if own := daemon.start_unless_serving(instance, logs / "daemon.log"):
            procs.append(own)
    except RuntimeError as e:
        print(f"yunque ui: {e}", file=sys.stderr)
        return 1
    webserver = Path(sys.executable).with_name("dagster-webserver")
    with open(logs / "webserver.log", "a") as out:
        procs.append(subprocess.Popen([str(webserver), "-h", args.host, "-p", str(args.port), *daemon.CODE_LOCATION],
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                      env={**os.environ}))
    print(f"Dagster UI for {home}: http://{args.host}:{args.port} (logs in {logs}/webserver.log, daemon.log); "
          "Ctrl-C stops it", flush=True)
    try:
        ticks = 0
        while all(p.poll() is None for p in procs):
            time.sleep(1)
            ticks += 1
            # a daemon we found at start (a `yunque run`'s) may have ended with its command
            if ticks % 30 == 0 and len(procs) == 1 and (own := daemon.start_unless_serving(instance, logs / "daemon.log")):
                procs.insert(0, own)
        dead = next(p for p in procs if p.poll() is not None)
        print(f"yunque ui: {dead.args[0]} exited with code {dead.returncode}; see the logs in {logs}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop(procs)
        if any("assets.daemon" in p.args for p in procs):
            daemon.forget(instance)


def stop(procs: list[subprocess.Popen], grace_s: float = 20) -> None:
    """Each child in its own session: SIGTERM (the webserver's uvicorn and the daemon both
    shut down on it), then SIGKILL whatever is left after `grace_s` in all: a webserver
    holding a browser's connection open must not outlive the command."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def add_commands(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("ui", help="open the Dagster UI (webserver and daemon) on this home")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=3000)
    u.set_defaults(fn=cmd_ui)
