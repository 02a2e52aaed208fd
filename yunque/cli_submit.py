"""`yunque run`: register the shards, submit one backfill to the Dagster instance, follow
it. The daemon of a running `yunque ui` or `dagster dev` serves it; without one, this
command starts one for its own duration (its log in $DAGSTER_HOME/daemon.log)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def _run_config(settings, corpus) -> dict:
    """The run's settings as launchpad config: a daemon started before this command, with
    other settings in its environment, still runs exactly what this command asked for."""
    cfg = settings.model_dump(mode="json", exclude_none=True)
    cfg["overrides"] = _pruned(cfg.get("overrides", {}))
    return {"resources": {"settings": {"config": cfg},
                          "corpus": {"config": {k: v for k, v in corpus.model_dump(mode="json").items()
                                                if v is not None}}}}


def _pruned(d: dict) -> dict:
    """Only the fields that are set: empty sections left out."""
    out = {}
    for k, v in d.items():
        v = _pruned(v) if isinstance(v, dict) else v
        if v not in ({}, None):
            out[k] = v
    return out


def _fresh(keys, resources, listed):
    """What the data stages find up to date (`stages.data_plan`), when the selection has
    data assets: the key each output would have now against the one it has."""
    from stages import data_plan

    if not {k.to_user_string() for k in keys} & {*data_plan.PER_SHARD, *data_plan.WHOLE_CORPUS}:
        return None
    settings = resources["settings"]
    return data_plan.plan(settings.store(), settings.data_config(), {s.key: s.fingerprint for s in listed})


def _without_fresh_models(instance, defs, chosen, settings):
    """`chosen` less the model assets whose latest materialization started from the inputs,
    code and configuration they would start from now (`assets.model_plan`)."""
    from assets.model_plan import model_fresh
    from stages import data_plan

    graph = defs.resolve_asset_graph()
    model = {t.asset_key for t in chosen if t.partition_key is None
             and t.asset_key.to_user_string() not in data_plan.WHOLE_CORPUS}
    running = {t.asset_key for t in chosen} - model
    fresh = model_fresh(instance, graph, sorted(model), running, settings)
    return {t for t in chosen if t.asset_key not in fresh}


def run_backfill(args: argparse.Namespace, home: Path, chosen, line: Callable, finish: Callable) -> int:
    from assets import client, daemon
    from assets.definitions import build_resources, defs
    from yunque.cli_follow import follow
    from yunque.env import home_url

    try:
        keys = client.select(defs, args.select)
        resources = build_resources(home_url(), chosen.corpus, chosen.preset, chosen.overrides,
                                    chosen.s3_endpoint or None)
        instance = client.instance()
        listed = resources["corpus"].shards()  # once: the partitions and the plan see the same listing
        shards, gone = client.register_shards(instance, resources["corpus"], listed)
    except ValueError as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    if gone:
        print(f"shards gone from the corpus, deregistered (their outputs stay on disk): {', '.join(gone)}")
    where = home if home_url() == str(home) else f"{home_url()} (local cache {home})"
    print(f"corpus {chosen.corpus} ({len(shards)} shards); home {where}; preset {chosen.preset}")
    planned = client.targets(instance, defs, keys, shards)
    chosen_targets = client.targets(instance, defs, keys, shards, _fresh(keys, resources, listed))
    chosen_targets = _without_fresh_models(instance, defs, chosen_targets, resources["settings"])
    if len(chosen_targets) < len(planned):
        print(f"up to date, left out: {len(planned) - len(chosen_targets)} of {len(planned)} asset partitions "
              "(their code, configuration and inputs are unchanged)")
    if not chosen_targets:
        print("nothing changed: no run started")
        finish(home, [], shards, chosen.preset)
        return 0
    backfill_id = client.submit(
        instance, defs, chosen_targets, tags={"yunque/command": "run"},
        run_config=_run_config(resources["settings"], resources["corpus"]),
        title=f"yunque run: {args.select or 'everything'}")
    own = None
    if not daemon.serving(instance):
        log = Path(instance.root_directory) / "daemon.log"
        print(f"starting a Dagster daemon for this run (log: {log})")
        own = daemon.start(log, backfills_only=True)
        try:
            daemon.wait_serving(instance, own, log)
        except RuntimeError as e:
            daemon.stop(own, instance)
            client.cancel(instance, backfill_id, no_daemon=True)
            print(f"yunque run: {e}", file=sys.stderr)
            return 1
    print(f"backfill {backfill_id}: {len(keys)} assets x {len(shards)} shards "
          "(UI: Overview > Backfills); Ctrl-C cancels it")
    follower = client.Follower(instance, backfill_id)
    try:
        follow(follower, home / "data", line)
    except KeyboardInterrupt:
        print("\ncancelling the backfill and its runs...", file=sys.stderr)
        client.cancel(instance, backfill_id)
        try:
            follow(follower, home / "data", line)
        except KeyboardInterrupt:
            pass
        return 130
    finally:
        if own is not None:
            daemon.stop(own, instance)
    status = instance.get_backfill(backfill_id).status.value
    finish(home, follower.reports, shards, chosen.preset)
    ok = status == "COMPLETED_SUCCESS" and all(r.ok for r in follower.reports)
    if not ok:
        print(f"backfill {backfill_id} ended {status}", file=sys.stderr)
    return 0 if ok else 1


