"""Following a backfill in the terminal: a bar of asset partitions done out of planned,
a line per finished run (and per asset of a run of no shards as it materializes: the
model half is one run), a line per step put up for retry (for training, where its next
attempt resumed), and, while a training asset runs, its step out of its steps with the
ETA on a line of its own. The runs execute in other processes (launched by the
daemon), so nothing they print can land on these lines."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from stages.asset_names import TRAINED


def training_status(data: Path, asset: str) -> tuple[int, int, float | None] | None:
    """(step, steps, eta seconds) of a training asset from its own records, or None."""
    metrics, config = data / asset / "metrics.jsonl", data / asset / "train_config.json"
    if not metrics.exists() or not config.exists():
        return None
    try:
        steps = int(json.loads(config.read_text())["train"]["steps"])
        tail = metrics.read_bytes()[-4096:].decode(errors="replace").splitlines()
    except (OSError, ValueError, KeyError):
        return None
    for line in reversed(tail):
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by the read or by a kill
            continue
        if rec.get("event") in ("step", "done") and "step" in rec:
            return int(rec["step"]), max(steps, int(rec["step"])), rec.get("eta_s")
    return 0, steps, None


def resumed(data: Path, asset: str, offset: int) -> str | None:
    """Where a training asset's new attempt started, from the records its metrics.jsonl got
    after byte `offset`: "resumed from step N (checkpoint ...)", "started at step N" with no
    checkpoint to resume from, or None while the attempt has not started."""
    try:
        with open(data / asset / "metrics.jsonl", "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "resume":
            return f"resumed from step {rec['step']} (checkpoint {rec.get('checkpoint', '?')})"
        if rec.get("event") == "start":
            return f"started again at step {rec['step']} (no checkpoint to resume from)"
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA after the first steps"
    m, s = divmod(int(seconds), 60)
    return f"ETA {m // 60}h{m % 60:02d}m" if m >= 60 else f"ETA {m}m{s:02d}s"


# The pause between two polls: POLL_SHARE times the CPU the last poll took, within these
# bounds. A poll reads the backfill (its partition subsets) and its runs: 3-4% of a core at
# 1,000 shards with a poll a second, taken from the runs on a 2-core machine; a few ms at
# 24 shards, where a fixed 2 s pause was 1-2 s of a 20 s command spent waiting.
POLL_SHARE = 25
POLL_S = (0.25, 2.0)


def follow(follower, data: Path, describe: Callable[[object], str], poll_s: float | None = None,
           watch: Callable[[], None] | None = None, deadline: float | None = None) -> bool:
    """Until the backfill ends (True), or `deadline` (time.monotonic()) passes (False).
    `describe(report)` gives a finished run's line; `watch()` is called at each poll (it
    may raise to stop following). Polls `poll_s` apart, or as POLL_SHARE says: at most
    about 4% of a core."""
    follower.poll()
    first = follower.progress()
    quiet = not sys.stderr.isatty()  # in a log file the bars would be a stream of redraws: lines only
    bar = tqdm(total=first.planned, desc="asset partitions", unit="", dynamic_ncols=True, disable=quiet,
               bar_format="{desc}: {n}/{total} |{bar}| {elapsed} {postfix}")
    train_line = tqdm(total=0, bar_format="{desc}", position=1, leave=False, dynamic_ncols=True, disable=quiet)
    said = 0.0  # when the training line was last written out (log files only)
    retried: dict[str, tuple[int, int]] = {}  # training asset put up for retry -> (attempt, metrics.jsonl size then)

    def write(text: str) -> None:
        if text:
            tqdm.write(text)

    try:
        while True:
            began = time.process_time()  # CPU, not wall: a wait for a busy core is not ours to save
            if watch is not None:
                watch()
            if deadline is not None and time.monotonic() > deadline:
                return False
            follower.poll()
            ended = follower.finished()
            for report in follower.new_reports():
                write(describe(report))
            p = follower.progress()
            for report in follower.new_live():  # each asset of a long run (the model half) as it lands
                write(describe(report))
            for r in follower.new_retries():
                write(f"[{r.step}] failed, retrying (attempt {r.attempt}): {r.cause}")
                if r.step in TRAINED:
                    retried[r.step] = (r.attempt, _size(data / r.step / "metrics.jsonl"))
            for asset, (attempt, offset) in list(retried.items()):
                if where := resumed(data, asset, offset):
                    write(f"[{asset}] attempt {attempt}: {where}")
                    del retried[asset]
            bar.total = max(p.planned, 1)
            bar.n = p.done
            bar.set_postfix_str(f"{p.failed} failed" if p.failed else "", refresh=False)
            bar.refresh()
            training = [(a, s) for a in TRAINED for step, _ in p.active if step == a
                        for s in [training_status(data, a)] if s is not None]
            if training:
                asset, (step, steps, eta) = training[0]
                text = f"  training {asset}: step {step} of {steps}, {eta_text(eta)}"
                train_line.set_description_str(text)
                if quiet and time.monotonic() - said >= 60:  # no live line in a log: one a minute
                    tqdm.write(text.strip())
                    said = time.monotonic()
            else:
                running = ", ".join(f"{a}[{k}]" if k else a for a, k in p.active[:4])
                train_line.set_description_str(f"  running: {running}" if running else "  waiting for the next runs")
            if ended:
                follower.poll()  # the runs as they were when the backfill ended
                for report in follower.new_reports():
                    write(describe(report))
                return True
            took = time.process_time() - began
            time.sleep(poll_s if poll_s is not None else min(POLL_S[1], max(POLL_S[0], POLL_SHARE * took)))
    finally:
        train_line.close()
        bar.close()
