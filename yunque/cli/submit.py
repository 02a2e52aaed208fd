"""`yunque run`: register the shards, submit one backfill to the Dagster instance, follow
it. The daemon of a running `yunque ui` or `dagster dev` serves it; without one, this
command starts one for its own duration (its log in $DAGSTER_HOME/daemon.log)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# After Ctrl-C: how long the daemon gets to cancel the runs before the command stops it
CANCEL_WAIT_S = 60.0
# How often a command that found another process' daemon checks that it still serves
SERVING_CHECK_S = 15.0
# Our daemon not answering (its process stopped, or no heartbeat for HEARTBEAT_LATE_S:
# Dagster beats every 30 s): a line every SILENT_S, and after YUNQUE_DAEMON_SILENCE_LIMIT
# seconds (default 300) the command gives up with one line and the resuming command.
SILENT_S = 30.0
HEARTBEAT_LATE_S = 75.0
FROM_OUTSIDE = "marked as failed from outside the execution context"


# The disk holding the instance full for this long, under a run: the command stops (one
# line, `yunque.faults`). The daemon can then record nothing, not even a dead run's end,
# and kept database connections go on reading, so the backfill would be followed forever.
FULL_FOR_S = 10.0


class DaemonLost(RuntimeError):
    """The daemon this command depends on is gone and was not replaced."""


class DaemonKeeper:
    """The daemon a `yunque run` depends on: the one serving the instance, or ours,
    started for this command (backfills only) and stopped with it. Ours is started once
    more if it exits; another process' daemon is checked every SERVING_CHECK_S and
    replaced by ours if it stopped serving. When ours exits a second time, `ensure`
    raises DaemonLost: one line, with the log to read and the command that resumes."""

    def __init__(self, instance, log: Path, env: dict[str, str] | None = None):
        import os

        self.instance, self.log, self.env = instance, log, env
        self.own = None  # the daemon this command started, while it runs
        self.deaths = 0  # how often ours exited under us
        self.next_check = 0.0  # when to look again whether another process' daemon serves
        self.silent_since: float | None = None  # ours has not answered since (time.time())
        self.said_silent = 0.0  # the silence (seconds) last reported
        self.silences = 0  # silences ours came back from: runs failed meanwhile are retried once
        self.silence_limit = float(os.environ.get("YUNQUE_DAEMON_SILENCE_LIMIT", "300"))

    def _start(self, why: str, stream) -> None:
        """Start ours, unless another command started one meanwhile: then that one serves."""
        from orchestration import daemon

        try:
            self.own = daemon.start_unless_serving(self.instance, self.log, backfills_only=True, env=self.env)
        except RuntimeError as e:
            raise DaemonLost(f"{e}. Run the same command again to resume.") from e
        if self.own is not None:
            print(why, file=stream, flush=True)

    def ensure(self) -> None:
        from orchestration import daemon

        if self.own is None:
            if time.monotonic() < self.next_check:
                return
            first = self.next_check == 0.0
            self.next_check = time.monotonic() + SERVING_CHECK_S
            if not daemon.serving(self.instance):  # checked again under the lock
                self._start(f"starting a Dagster daemon for this run (log: {self.log})" if first else
                            f"the daemon serving this instance is gone; starting one for this command (log: {self.log})",
                            sys.stdout if first else sys.stderr)
            return
        if self.own.poll() is None:
            self._watch_silence()
            return
        code, self.own = self.own.returncode, None
        daemon.forget(self.instance)
        self.deaths += 1
        if self.deaths > 1:
            raise DaemonLost(f"the Dagster daemon exited again (code {code}); its log: {self.log}. "
                             "Run the same command again to resume.")
        self._start(f"the Dagster daemon exited (code {code}); starting another (log: {self.log})", sys.stderr)

    def _silence(self) -> tuple[float, str] | None:
        """(since when, the process' state) while our daemon does not answer: its process
        is stopped (SIGSTOP, a debugger), or it has written no heartbeat for HEARTBEAT_LATE_S."""
        import psutil

        try:
            state = psutil.Process(self.own.pid).status()
        except psutil.Error:
            return None  # gone: poll() says so next time
        now = time.time()
        if state in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return (self.silent_since or now, state)
        beat = self.instance.get_daemon_heartbeats().get("BACKFILL")
        if beat is not None and now - beat.timestamp > HEARTBEAT_LATE_S:
            return (min(self.silent_since or now, beat.timestamp), state)
        return None

    def _watch_silence(self) -> None:
        found = self._silence()
        if found is None:
            if self.silent_since is not None:
                print(f"the Dagster daemon (pid {self.own.pid}) answers again after "
                      f"{time.time() - self.silent_since:.0f} s; going on", file=sys.stderr, flush=True)
                self.silent_since, self.said_silent = None, 0.0
                self.silences += 1
            return
        self.silent_since, state = found
        silent = time.time() - self.silent_since
        if silent >= self.silence_limit:
            raise DaemonLost(f"the Dagster daemon (pid {self.own.pid}) has not answered for {silent:.0f} s "
                             f"(state: {state}): stopping it; its log: {self.log}. Run the same command again "
                             "to resume.")
        if silent - self.said_silent >= SILENT_S:
            self.said_silent = silent
            print(f"the Dagster daemon (pid {self.own.pid}) has not answered for {silent:.0f} s; state: {state} "
                  f"(this command gives up at {self.silence_limit:.0f} s)", file=sys.stderr, flush=True)

    def stop(self, backfill_id: str | None = None) -> None:
        """Stop ours, but not under runs this command did not submit (a backfill from the
        UI, say, that our daemon was serving): those are waited for first, with a line
        saying so; Ctrl-C stops at once."""
        from orchestration import client, daemon

        if self.own is None:
            return
        if self.silent_since is not None:  # a silent daemon runs nothing: waiting on its runs would never end
            daemon.stop(self.own, self.instance)
            self.own = None
            return
        idle = False
        try:
            said = set()
            while self.own.poll() is None and (others := client.runs_in_flight(self.instance, {backfill_id} if backfill_id else ())):
                if set(others) - said:
                    print(f"waiting for {len(others)} runs this command did not submit, which its daemon is "
                          f"running ({', '.join(r[:8] for r in others)}), before stopping it; Ctrl-C stops now",
                          file=sys.stderr, flush=True)
                    said |= set(others)
                time.sleep(2)
            idle = not client.runs_in_flight(self.instance)
        except KeyboardInterrupt:
            pass
        finally:
            daemon.stop(self.own, self.instance, idle=idle)
            self.own = None


def _run_config(settings, corpus) -> dict:
    """The run's settings as launchpad config: a daemon started before this command, with
    other settings in its environment, still runs exactly what this command asked for."""
    from resources.overrides import as_dict

    cfg = settings.model_dump(mode="json", exclude_none=True)
    cfg["overrides"] = as_dict(settings.overrides)
    return {"resources": {"settings": {"config": cfg},
                          "corpus": {"config": {k: v for k, v in corpus.model_dump(mode="json").items()
                                                if v is not None}}}}


def _fresh(keys, resources, listed):
    """What the data stages find up to date (`stages.data.plan`), when the selection has
    data assets: the key each output would have now against the one it has."""
    from stages.data import plan as data_plan

    if not {k.to_user_string() for k in keys} & {*data_plan.PER_SHARD, *data_plan.WHOLE_CORPUS}:
        return None
    settings = resources["settings"]
    out = data_plan.plan(settings.store(), settings.data_config(), {s.key: s.fingerprint for s in listed})
    chosen = {k.to_user_string() for k in keys}
    for where, why in sorted(out.damaged.items()):
        todo = "rebuilding" if where.split("/")[0] in chosen else "not in this selection: yunque verify --repair rebuilds it"
        print(f"damaged: {where} ({why}); {todo}")
    return out


def _without_fresh_models(instance, defs, chosen, settings):
    """`chosen` less the model assets whose latest materialization started from the inputs,
    code and configuration they would start from now (`assets.training.plan`)."""
    from assets.training.plan import model_fresh
    from stages.data import plan as data_plan

    graph = defs.resolve_asset_graph()
    model = {t.asset_key for t in chosen if t.partition_key is None
             and t.asset_key.to_user_string() not in data_plan.WHOLE_CORPUS}
    running = {t.asset_key for t in chosen} - model
    fresh = model_fresh(instance, graph, sorted(model), running, settings)
    return {t for t in chosen if t.asset_key not in fresh}


def _say_lost(lost: dict[str, list[str]], keys) -> None:
    """One line per data asset whose recorded materializations point at data the store no
    longer has, and how it comes back."""
    chosen = {k.to_user_string() for k in keys}
    for asset, parts in lost.items():
        what = "" if parts == ["*"] else f" of {len(parts)} shards ({', '.join(parts[:5])}{', ...' if len(parts) > 5 else ''})"
        fix = ("this run materializes it again" if asset in chosen else
               f"materialize it again: yunque run --select 'key:{asset}' (or Materialize in the UI)")
        print(f"{asset}{what}: recorded as materialized in Dagster, but its output is gone from the store; {fix}")


def disk_guard(dagster_home: Path) -> Callable[[], None]:
    """A check to call while following: raises ENOSPC once the disk holding the instance
    has been full (`yunque.faults.full`) for FULL_FOR_S."""
    import errno

    from yunque import faults

    since: list[float] = []

    def check() -> None:
        if not faults.full(dagster_home):
            since.clear()
            return
        since[:] = since or [time.monotonic()]
        if time.monotonic() - since[0] >= FULL_FOR_S:
            raise OSError(errno.ENOSPC, "No space left on device", str(dagster_home))

    return check


def batch_env(instance, shards: list) -> dict[str, str]:
    """The batch size for the daemon this command may start: one run per free run slot
    for `shards`, the targeted ones (`assets.batch.sized_to_slots`), unless
    YUNQUE_SHARDS_PER_RUN says otherwise."""
    import os

    from assets.batch import SHARDS_PER_RUN_VAR, sized_to_slots
    from orchestration import client

    if os.environ.get(SHARDS_PER_RUN_VAR) or not shards:
        return {}
    return sized_to_slots(len(shards), client.free_slots(instance), sum(size for s in shards for _, size, _ in s.files))


def run_backfill(args: argparse.Namespace, home: Path, chosen, line: Callable, finish: Callable) -> int:
    from assets.definitions import build_resources, definitions_with
    from orchestration import client
    from orchestration import follower as follower_mod
    from yunque.cli.follow import follow
    from yunque.env import home_url

    try:
        resources = build_resources(home_url(), chosen.corpus, chosen.preset, chosen.overrides,
                                    chosen.s3_endpoint or None)
        defs = definitions_with(resources)
        keys = client.select(defs, args.select)
        instance = client.instance()
        listed = resources["corpus"].shards()  # once: the partitions and the plan see the same listing
        shards, gone = client.register_shards(instance, resources["corpus"], listed)
    except ValueError as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    if gone:
        print(f"shards gone from the corpus, deregistered (their outputs stay on disk): {', '.join(gone)}")
    if kept := sorted(set(instance.get_dynamic_partitions("shards")) - set(shards)):
        print(f"shards gone from the corpus that an unfinished backfill targets stay registered until it ends "
              f"(this run leaves them out): {', '.join(kept)}")
    where = home if home_url() == str(home) else f"{home_url()} (local cache {home})"
    print(f"corpus {chosen.corpus} ({len(shards)} shards); home {where}; preset {chosen.preset}")
    if home_url() == str(home):
        _say_lost(client.lost_outputs(instance, resources["settings"].store(), shards), keys)
    planned = client.targets(instance, defs, keys, shards)
    chosen_targets = client.targets(instance, defs, keys, shards, _fresh(keys, resources, listed))
    chosen_targets = _without_fresh_models(instance, defs, chosen_targets, resources["settings"])
    if len(chosen_targets) < len(planned):
        print(f"up to date, left out: {len(planned) - len(chosen_targets)} of {len(planned)} asset partitions "
              "(their code, configuration and inputs are unchanged)")
    if not chosen_targets:
        print("nothing changed: no run started")
        finish(home, [], shards, chosen)
        return 0
    backfill_id = client.submit(
        instance, defs, chosen_targets, tags={"yunque/command": "run", client.CLIENT_TAG: client.client_id()},
        run_config=_run_config(resources["settings"], resources["corpus"]),
        title=f"yunque run: {args.select or 'everything'}")
    log = Path(instance.root_directory) / "daemon.log"
    targeted = {t.partition_key for t in chosen_targets}
    keeper = DaemonKeeper(instance, log, batch_env(instance, [s for s in listed if s.key in targeted]))
    try:
        keeper.ensure()
    except RuntimeError as e:
        keeper.stop(backfill_id)
        client.cancel(instance, backfill_id, no_daemon=True)
        print(f"yunque run: {e}", file=sys.stderr)
        return 1
    print(f"backfill {backfill_id}: {len(keys)} assets x {len(shards)} shards "
          "(UI: Overview > Backfills); Ctrl-C cancels it")
    follower = follower_mod.Follower(instance, backfill_id)
    try:
        full = disk_guard(Path(instance.root_directory))
        follow(follower, home / "data", line, watch=lambda: (keeper.ensure(), full()))
    except DaemonLost as e:
        # the daemon first: one stopped in the middle of a write holds sqlite's lock, and
        # the cancellation below would wait on it ("database is locked")
        keeper.stop(backfill_id)
        client.cancel(instance, backfill_id, no_daemon=True)
        finish(home, follower.reports, shards, chosen)
        print(f"yunque run: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ncancelling the backfill and its runs (at most {CANCEL_WAIT_S:.0f} s)...", file=sys.stderr)
        client.cancel(instance, backfill_id)
        try:
            done = follow(follower, home / "data", line, deadline=time.monotonic() + CANCEL_WAIT_S)
        except KeyboardInterrupt:
            done = False
        if not done:  # stopping our daemon below stops its runs; say the backfill is over
            client.cancel(instance, backfill_id, no_daemon=True)
        finished = sum(1 for r in follower.reports if r.ok)
        print(f"cancelled: {finished} runs had finished and their outputs are kept; run the same command again "
              "to do the rest", file=sys.stderr)
        return 130
    finally:
        keeper.stop(backfill_id)
    status = instance.get_backfill(backfill_id).status.value
    ok = status == "COMPLETED_SUCCESS" and all(r.ok for r in follower.reports)
    outside = [r for r in follower.reports if not r.ok and FROM_OUTSIDE in (r.error or "")]
    if not ok and keeper.silences and outside and not getattr(args, "retried_silence", False):
        # the daemon's code server gave up on its runs while the daemon was stopped
        print(f"{len(outside)} {'runs were' if len(outside) > 1 else 'run was'} failed from outside while the Dagster "
              "daemon did not answer; retrying once", file=sys.stderr, flush=True)
        args.retried_silence = True
        return run_backfill(args, home, chosen, line, finish)
    if not ok and not getattr(args, "going_on", False) and \
            (left := follower_mod.failed_only_on(follower.reports, resources["corpus"])):
        # Dagster does not run a whole-corpus join after a failed parent partition: the
        # shards that left the corpus are deregistered now that the backfill has ended,
        # and a second backfill does what is left over the shards that are there
        print(f"{'shards' if len(left) > 1 else 'shard'} {', '.join(left)} left the corpus during the run and "
              "failed alone; going on over the shards that are there", flush=True)
        args.going_on = True
        return run_backfill(args, home, chosen, line, finish)
    finish(home, follower.reports, shards, chosen)
    if not ok:
        print(f"backfill {backfill_id} ended {status}", file=sys.stderr)
    return 0 if ok else 1


