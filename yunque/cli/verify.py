"""`yunque verify [--repair]`: check every committed output of the home against the
checksums its manifest recorded, every byte, locally or in the object store; with
`--repair`, rebuild the damaged ones and the data outputs downstream of them, through
the same path as `yunque run`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tqdm import tqdm

from yunque import env


def add_parser(sub, run: Callable[[list[str]], int]) -> None:
    """`run(argv)` runs `yunque run` with those arguments (the repair)."""
    p = sub.add_parser("verify", help="check every stored output against its checksums (and --repair the damaged)")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the damaged outputs, and the data outputs downstream of them, then check again")
    p.set_defaults(fn=cmd_verify, run=run)


def _check(store) -> list:
    from stages.store.verify import verify_home

    with tqdm(desc="outputs checked", unit="", dynamic_ncols=True, disable=not sys.stderr.isatty()) as bar:
        def progress(i: int, total: int, what: str) -> None:
            bar.total = total
            bar.n = i
            bar.set_postfix_str(what, refresh=True)

        checked, damaged = verify_home(store, progress)
        bar.n = checked
    for d in damaged:
        print(d.line())
    print(f"{checked} outputs checked in {env.home_url()}: "
          + (f"{len(damaged)} damaged" if damaged else "every file matches its checksum"))
    return damaged


def repair_selection(assets: set[str], present: set[str]) -> str:
    """A selection of the damaged assets and the data assets downstream of them that the
    home has (`present`): what was there comes back, nothing new is built. The model
    assets are left out: a rebuilt output has the key, and so the content, it had, so a
    model trained on it stays valid."""
    from assets.definitions import build_resources, definitions_with
    from stages.data.plan import PER_SHARD, WHOLE_CORPUS

    graph = definitions_with(build_resources(env.home_url())).resolve_asset_graph()
    children = {n.key.to_user_string(): [k.to_user_string() for k in n.child_keys] for n in graph.asset_nodes}
    data = {*PER_SHARD, *WHOLE_CORPUS} & (present | assets)
    chosen: set[str] = set()
    todo = list(assets)
    while todo:
        name = todo.pop()
        if name not in chosen and name in data:
            chosen.add(name)
            todo += children.get(name, [])
    return " or ".join(f"key:{name}" for name in sorted(chosen))


def cmd_verify(args: argparse.Namespace) -> int:
    from stages.store.outputs import DataStore
    from stages.store.verify import committed, quarantine

    env.use_home(args.home)
    store = DataStore(env.home_url())
    damaged = _check(store)
    if not damaged:
        return 0
    if not args.repair:
        print("rebuild them: yunque verify --repair (or yunque run, which rebuilds what it selects)")
        return 1
    for d in damaged:
        quarantine(store, d)
    import json

    from stages.store import home as home_settings

    selection = repair_selection({d.asset for d in damaged}, {asset for asset, _ in committed(store)})
    print(f"repairing: yunque run --select '{selection}'")
    saved = home_settings.read(env.home_url())  # the configuration the outputs were built with
    rc = args.run(["run", "--select", selection, "--preset", saved.preset, "--overrides", json.dumps(saved.overrides)])
    if rc != 0:
        print(f"yunque verify: the repair run failed (exit {rc}); run `yunque verify --repair` again once it is fixed",
              file=sys.stderr)
        return rc
    return 1 if _check(DataStore(env.home_url())) else 0
