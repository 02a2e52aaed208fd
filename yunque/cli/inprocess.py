"""`yunque run --in-process`: the assets run in this process, one run after another
(orchestration.runner), for debugging with a debugger or a profiler. No daemon, no run queue."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def run_in_process(args: argparse.Namespace, home: Path, chosen, line: Callable, finish: Callable) -> int:
    from orchestration.runner import plan, run_graph

    try:
        phases = plan(args.select)
    except ValueError as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    print(f"corpus {chosen.corpus}; home {home}; in this process, {len(phases)} phase(s): "
          + " | ".join(",".join(k.to_user_string() for k in p.keys) for p in phases))
    try:
        summary = run_graph(chosen.corpus, args.select, chosen.preset, chosen.overrides, chosen.s3_endpoint or None,
                            on_progress=lambda report: print(line(report), flush=True))
    except ValueError as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    finish(home, summary.runs, summary.shards, chosen)
    return 0 if summary.ok else 1
