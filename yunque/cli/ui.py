"""`yunque ui`: the Dagster UI (webserver) and the daemon over this home, in the
foreground; Ctrl-C stops both. The daemon is not started when one already serves the
instance (a `yunque run` in progress, say). It is what `dagster dev` does, without
`dagster dev`'s deprecation notice and with the home's own instance settings."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from yunque import env


def _save_timing(args: argparse.Namespace) -> None:
    """--sensor-interval and --training-cron go into the home's settings, where every
    process that loads the code location (this UI, any daemon started later) reads them."""
    from dataclasses import replace

    from stages.store import home as home_settings

    if args.sensor_interval is None and args.training_cron is None:
        return
    from assets.operations.automation import valid_cron

    if args.sensor_interval is not None and args.sensor_interval < 1:
        raise ValueError(f"--sensor-interval {args.sensor_interval}: give a number of seconds, 1 or more")
    if args.training_cron is not None and not valid_cron(args.training_cron):
        raise ValueError(f"--training-cron {args.training_cron!r} is not a cron expression (e.g. '*/15 * * * *')")
    url = env.home_url()
    saved = home_settings.read(url)
    home_settings.write(url, replace(
        saved, sensor_interval_s=saved.sensor_interval_s if args.sensor_interval is None else args.sensor_interval,
        training_cron=saved.training_cron if args.training_cron is None else args.training_cron))


def _save_language(args: argparse.Namespace) -> str | None:
    """--language goes into the home's overrides (the tree's `language`), which the code
    location reads: the UI's runs, sensors and schedules filter and train for it. Returns
    the line to print."""
    from dataclasses import replace

    from stages.store import home as home_settings
    from yunque.cli import language as cli_language

    if args.language is None:
        return None
    url = env.home_url()
    saved = home_settings.read(url)
    theirs = {k: v for k, v in saved.overrides.items() if k not in cli_language.LANGUAGE_KEYS}
    overrides, lines = cli_language.with_language(theirs, args.language, {})
    home_settings.write(url, replace(saved, overrides=overrides))
    return "; ".join([*lines, f"language of this home: {overrides['language']}"])


def _other_daemon(record: dict | None) -> str | None:
    """What to tell the user about the daemon that serves this home instead of ours: its
    sensors and schedules may not tick as this UI shows them."""
    from stages.store import home as home_settings

    wanted = home_settings.timing(env.home_url())
    if record is None:
        return ("a daemon this command did not start (dagster dev, dagster-daemon run) serves this home; "
                "its sensors and schedules tick as its own code location says, which this UI may not show")
    if record.get("scope") == "backfills":
        return (f"the daemon of a `yunque run` (pid {record['pid']}) serves this home and runs backfills only: "
                "sensors and schedules do not tick until it stops; this UI then starts a daemon of its own")
    theirs = home_settings.Timing(**record["timing"]) if "timing" in record else None
    if theirs != wanted:
        return (f"the daemon serving this home (pid {record['pid']}) ticks with "
                f"{theirs.describe() if theirs else 'the timing it loaded'}, not {wanted.describe()} as this UI "
                "shows: stop the `yunque ui` that started it, and this one takes over within 30 s")
    return None


def cmd_ui(args: argparse.Namespace) -> int:
    from orchestration import client, daemon

    home = env.use_home(args.home)
    try:
        _save_timing(args)
        if said := _save_language(args):
            print(said)
    except ValueError as e:
        print(f"yunque ui: {e}", file=sys.stderr)
        return 2
    instance = client.instance()
    logs = Path(instance.root_directory)
    procs: list[subprocess.Popen] = []
    try:
        try:
            if own := daemon.start_unless_serving(instance, logs / "daemon.log"):
                procs.append(own)
        except RuntimeError as e:
            print(f"yunque ui: {e}", file=sys.stderr)
            return 1
        if not procs and (warning := _other_daemon(daemon.serving_record(instance))):
            print(f"yunque ui: {warning}", file=sys.stderr)
        webserver = Path(sys.executable).with_name("dagster-webserver")
        with open(logs / "webserver.log", "a") as out, daemon.interrupts_held():
            procs.append(subprocess.Popen([str(webserver), "-h", args.host, "-p", str(args.port),
                                           *daemon.CODE_LOCATION], stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True, env={**os.environ}))
        print(f"Dagster UI for {home}: http://{args.host}:{args.port} (logs in {logs}/webserver.log, daemon.log); "
              "Ctrl-C stops it", flush=True)
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
        if any("orchestration.daemon" in p.args for p in procs):
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
    # A child killed outright (kill -9 of the webserver) left its own children behind: its
    # code server would wait out its heartbeat timeout (about 90 s) before leaving.
    from orchestration.daemon import empty_group

    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        empty_group(p.pid, grace_s=5)


def add_commands(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("ui", help="open the Dagster UI (webserver and daemon) on this home")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=3000)
    from yunque.cli import language as cli_language

    cli_language.add_argument(u, "the corpus' language, kept in the home's settings for the UI's runs")
    u.add_argument("--sensor-interval", type=int, metavar="S",
                   help="seconds between the shard sensor's corpus listings (kept in the home's settings; default 60)")
    u.add_argument("--training-cron", metavar="CRON",
                   help="cron of the train_on_new_data schedule (kept in the home's settings; default hourly)")
    u.set_defaults(fn=cmd_ui)
