"""`yunque calibrate [--reference DIR] [--shard S ...]`: propose quality-rule thresholds
from the home's clean documents (and a folder of known-good documents), print them as a
table, save the proposal in the home and print the override that adopts it."""

from __future__ import annotations

import argparse
import json
import sys

from stages.preset_names import DEFAULT_PRESET
from yunque.cli import config as cli_config


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def _num(value: float | None) -> str:
    if value is None:
        return "off"
    return f"{value:g}"


def table(proposal) -> str:
    """The proposal, one rule a line: current and proposed threshold, and the share of
    corpus and reference documents each drops; last, the share of corpus documents all
    the rules together drop (a document failing two rules counted once)."""
    head = ("rule", "drops if", "current", "proposed", "corpus dropped", "reference dropped")
    rows = [head]
    for r in proposal.rules:
        rows.append((r.reason, r.drop_if, _num(r.current), _num(r.proposed),
                     f"{_pct(r.corpus_drop_current)} -> {_pct(r.corpus_drop_proposed)}",
                     f"{_pct(r.reference_drop_current)} -> {_pct(r.reference_drop_proposed)}"))
    if proposal.corpus_drop_proposed is not None:  # recorded since the budget is overall
        rows.append(("all rules (a document once)", "", "", "",
                     f"{_pct(proposal.corpus_drop_current)} -> {_pct(proposal.corpus_drop_proposed)}", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from stages.data.filter_profile import calibrate, save_proposal
    from stages.store import home as home_settings
    from stages.store.outputs import DataStore
    from yunque import env

    env.use_home(args.home)
    url = env.home_url()
    saved = home_settings.read(url)
    preset = args.preset or saved.preset or DEFAULT_PRESET
    overrides = args.overrides if args.overrides is not None else json.dumps(saved.overrides or {})
    try:
        cfg, _ = cli_config.checked(preset, overrides, url)
    except cli_config.BadConfig as e:
        print(f"yunque calibrate: {e}", file=sys.stderr)
        return 2
    store = DataStore(url)
    try:
        proposal = calibrate(store, cfg.filters, args.shard or None, args.reference, cfg.reader, cfg.clean,
                             tail=args.tail, margin=args.margin)
    except (FileNotFoundError, ValueError) as e:
        print(f"yunque calibrate: {e}", file=sys.stderr)
        return 1
    print(f"{proposal.n_corpus} corpus documents ({', '.join(proposal.settings['shards'])}), "
          f"{proposal.n_reference} reference documents; profile {cfg.filters.profile}, "
          f"language {cfg.filters.language}\n")
    print(table(proposal))
    path = save_proposal(store, proposal)
    print(f"\nsaved: {path}")
    adopt = json.dumps({**json.loads(overrides or "{}"), "filters.calibration": proposal.id})
    print(f"adopt it:  --overrides '{adopt}'")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("calibrate", help="propose quality-rule thresholds from the home's documents")
    c.add_argument("--reference", help="folder of known-good documents the proposal must keep")
    c.add_argument("--shard", action="append", help="a shard to measure (repeatable; default: every shard "
                                                    "with clean documents)")
    cli_config.add_preset_argument(c, default=None)
    c.add_argument("--overrides", help="JSON of config overrides (default: the home's)")
    c.add_argument("--tail", type=float, default=0.02,
                   help="share of corpus documents the whole proposal may drop, all rules together (0.02)")
    c.add_argument("--margin", type=float, default=0.05,
                   help="relative margin beyond the reference's most extreme value (0.05)")
    c.set_defaults(fn=cmd_calibrate)
