"""`yunque config show|schema`, and the check every command runs on its preset and
overrides before it touches the Dagster instance or any data."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stages.preset_names import DEFAULT_PRESET, RUN_PRESETS


class BadConfig(Exception):
    """A preset or overrides that cannot describe a run: one line, naming the key."""


def add_preset_argument(p: argparse.ArgumentParser, purpose: str = "configuration preset", *,
                        default: str | None = DEFAULT_PRESET, refused_at_parse: bool = False) -> None:
    """`--preset`, for every subcommand that takes one: the names from stages.preset_names,
    so that building the parser imports no configuration tree. `default` None: the command
    takes the home's remembered preset, else DEFAULT_PRESET. `refused_at_parse`: argparse
    refuses an unknown name; otherwise `checked` does, in one line with a did-you-mean."""
    names = sorted(RUN_PRESETS)
    said = f"default {default}" if default is not None else f"default: the home's, else {DEFAULT_PRESET}"
    # the names are listed in the usage either way; only where an unknown one is refused differs
    listed = {"choices": names} if refused_at_parse else {"metavar": "{" + ",".join(names) + "}"}
    p.add_argument("--preset", default=default, help=f"{purpose} ({said})", **listed)


def checked(preset_name: str, overrides: str | None, home: str | None = None) -> tuple[Any, dict]:
    """(the configuration tree, the overrides as a dict), or BadConfig. The tree is built
    for `home` (default: $YUNQUE_HOME), which holds any calibration the overrides adopt,
    and is the one the rest of this process uses (`stages.settings.tree`)."""
    from stages.config import ConfigError
    from stages.settings import tree

    try:
        raw = json.loads(overrides) if overrides else {}
    except json.JSONDecodeError as e:
        raise BadConfig(f"--overrides is not valid JSON: {e}") from None
    try:
        return tree(home, preset_name, raw), raw
    except ConfigError as e:
        raise BadConfig(str(e)) from None


def cmd_show(args: argparse.Namespace) -> int:
    try:
        cfg, _ = checked(args.preset, args.overrides, args.home)
    except BadConfig as e:
        print(f"yunque config: {e}", file=sys.stderr)
        return 2
    print(json.dumps(cfg.to_dict(), indent=2, ensure_ascii=False))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from stages.config import schema

    print(json.dumps(schema(), indent=2, ensure_ascii=False))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("config", help="print the resolved configuration tree or its JSON schema")
    csub = c.add_subparsers(dest="config_command", required=True)
    show = csub.add_parser("show", help="the tree a preset and overrides resolve to, as JSON")
    add_preset_argument(show)
    show.add_argument("--overrides", help='JSON of config overrides, e.g. \'{"langid.threshold": 0.5}\'')
    show.set_defaults(fn=cmd_show)
    schema = csub.add_parser("schema", help="the JSON schema of the configuration tree")
    schema.set_defaults(fn=cmd_schema)
