"""The `yunque` command: fetch the sample corpus, run the graph, show the configuration."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from yunque import env
from yunque.cli import calibrate as cli_calibrate
from yunque.cli import config as cli_config
from yunque.cli import inspect as cli_inspect
from yunque.cli import language as cli_language
from yunque.cli import node as cli_node
from yunque.cli import serve as cli_serve
from yunque.cli import summary
from yunque.cli import ui as cli_ui
from yunque.cli import verify as cli_verify
from yunque.cli.model import add_commands

if TYPE_CHECKING:
    from stages.store.home import HomeSettings


def _fetch(dest: Path, language: str = "es") -> int:
    from pipelines.data.sample.fetch import SampleFetchError, fetch_sample

    try:
        summary = fetch_sample(dest, language=language)
    except SampleFetchError as e:
        print(f"yunque fetch-sample: {e}", file=sys.stderr)
        return 2
    print(f"sample corpus in {dest}:")
    for shard, info in summary["shards"].items():
        note = " (already there)" if info.get("cached") else ""
        print(f"  {shard}: {info['files']:,} files, {info['documents']:,} documents, "
              f"{info['bytes'] / 1e6:.1f} MB{note}")
    return 0


def cmd_fetch_sample(args: argparse.Namespace) -> int:
    home = env.use_home(args.home)
    try:
        code, note = cli_language.resolve(args.language or "es")
    except cli_language.LanguageError as e:
        print(f"yunque fetch-sample: {e}", file=sys.stderr)
        return 2
    if note:
        print(note)
    dest = Path(args.dest).absolute() if args.dest else home / cli_language.sample_folder(code)
    return _fetch(dest, code)


def _settings(args: argparse.Namespace, home: Path, overrides: dict):
    """What this run uses, and what the home will remember for the UI, sensors and schedules:
    (saved, chosen, whether the home existed, lines to print)."""
    from stages.store import home as home_settings

    url = env.home_url()
    existed = home_settings.exists(url)
    saved = home_settings.read(url)
    overrides, lines = cli_language.with_language(overrides, args.language, saved.overrides)
    # with_language wrote every language key as its code: the sample's language is it
    sample = home / cli_language.sample_folder(cli_language.named(overrides) or "es")
    corpus = args.corpus or saved.corpus or str(sample)
    new = dataclasses.replace(saved, corpus=corpus, preset=args.preset, overrides=overrides,
                              s3_endpoint=args.s3_endpoint or saved.s3_endpoint)
    return saved, new, existed, lines


def _detect_language(chosen: HomeSettings) -> HomeSettings | None:
    """A new home whose command named no language takes the corpus' dominant one (one line
    says which); None when that language has no pack (the line says so)."""
    from stages.data.corpus_language import detect_corpus_language
    from stages.store.remote import storage_options

    found = detect_corpus_language(chosen.corpus, storage_options(chosen.corpus))
    if found.documents and found.code is None:
        print(f"yunque run: {found.line()}: give --language CODE to filter for one of them", file=sys.stderr)
        return None
    print(found.line() + ("" if found.documents else "; keeping the default language, es"))
    if found.code is None:
        return chosen
    return dataclasses.replace(chosen, overrides={**chosen.overrides, "language": found.code})


def cmd_run(args: argparse.Namespace) -> int:
    try:  # before anything is fetched, created or run
        _, overrides = cli_config.checked(args.preset, args.overrides, args.home)
    except cli_config.BadConfig as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    home = env.use_home(args.home)
    try:
        saved, chosen, existed, lines = _settings(args, home, overrides)
        cli_config.checked(args.preset, json.dumps(chosen.overrides), env.home_url())
    except (ValueError, cli_config.BadConfig) as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    language = cli_language.named(chosen.overrides)
    sample_language = language or "es"
    if chosen.corpus == str(home / cli_language.sample_folder(sample_language)) and not Path(chosen.corpus).exists():
        print(f"no corpus given and no sample corpus in {chosen.corpus}: fetching it first")
        if rc := _fetch(Path(chosen.corpus), sample_language):
            return rc
    if not existed and language is None:
        detected = _detect_language(chosen)
        if detected is None:
            return 2
        chosen = detected
    from yunque.cli import lease

    try:  # the tree that runs (built above, unless a new home's corpus gave its language)
        cfg, _ = cli_config.checked(chosen.preset, json.dumps(chosen.overrides), env.home_url())
    except cli_config.BadConfig as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 2
    work = lease.Lease(chosen.corpus, chosen.preset, lease.config_hash(cfg))
    try:
        with lease.held(work):  # before the home's settings are written: a refused command changes nothing
            return _run_leased(args, home, chosen, saved, existed)
    except lease.HomeBusy as e:
        print(f"yunque run: {e}", file=sys.stderr)
        return 3


def _run_leased(args: argparse.Namespace, home: Path, chosen: HomeSettings, saved: HomeSettings,
                existed: bool) -> int:
    from stages.store import home as home_settings

    url = env.home_url()
    home_settings.write(url, chosen)
    if existed and saved != chosen:
        print(f"settings of this home ({url}/{home_settings.SETTINGS_FILE}): corpus {chosen.corpus}, "
              f"preset {chosen.preset}, overrides {json.dumps(chosen.overrides) if chosen.overrides else 'none'}")
    if args.in_process:
        from yunque.cli.inprocess import run_in_process

        return run_in_process(args, home, chosen, summary.run_line, summary.finish)
    from yunque.cli.submit import run_backfill

    return run_backfill(args, home, chosen, summary.run_line, summary.finish)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM (timeout, kill, a CI runner) cleans up as Ctrl-C does


def parser() -> argparse.ArgumentParser:
    """Every subcommand and flag (the docs are checked against it: tests/test_docs.py)."""
    p = argparse.ArgumentParser(prog="yunque", description=__doc__)
    p.add_argument("--home", help="output and instance root: a directory, or s3://bucket/prefix (any fsspec URL; "
                                  "a local cache of it under $YUNQUE_CACHE or ~/.cache/yunque) (default "
                                  "$YUNQUE_HOME or ./.yunque)")
    p.add_argument("--s3-endpoint", dest="home_endpoint",
                   help="endpoint URL of an S3-compatible store (MinIO, ...) for the home and the corpus "
                        "(sets YUNQUE_S3_ENDPOINT)")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch-sample", help="build a sample corpus (Spanish, or French) from Debian doc packages")
    f.add_argument("--dest", help="where to put the shards (default $YUNQUE_HOME/sample, or sample-fr for French)")
    cli_language.add_argument(f, "the sample's language: es (default) or fr")
    f.set_defaults(fn=cmd_fetch_sample)
    r = sub.add_parser("run", help="materialize the graph for every shard of a corpus")
    r.add_argument("--corpus", help="DIR or s3://bucket/prefix, one shard per subdirectory/file (default: sample)")
    r.add_argument("--select", help="Dagster asset selection, e.g. 'key:raw_documents+' (default: everything)")
    cli_config.add_preset_argument(r)
    r.add_argument("--overrides", help='JSON of dotted config overrides, e.g. \'{"langid.threshold": 0.5}\'')
    cli_language.add_argument(r, "the corpus' language (default: the home's; a new home detects it from the corpus)")
    r.add_argument("--s3-endpoint", help="endpoint URL of an S3-compatible store")
    r.add_argument("--in-process", action="store_true",
                   help="debugging: run the assets in this process, one run after another, without the "
                        "daemon (no run queue, no concurrency)")
    r.set_defaults(fn=cmd_run)
    add_commands(sub)
    cli_config.add_commands(sub)
    cli_ui.add_commands(sub)
    cli_node.add_parser(sub)
    cli_inspect.add_parser(sub)
    cli_calibrate.add_parser(sub)
    cli_serve.add_parser(sub)
    cli_verify.add_parser(sub, lambda argv: cmd_run(parser().parse_args(argv)))
    return p


def main(argv: list[str] | None = None) -> int:
    env.apply()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (`cmd &`)
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given: `yunque serve` starts its engine with it
    endpoint = args.home_endpoint or getattr(args, "s3_endpoint", None)
    if endpoint:  # the runs, the daemon and the training processes inherit it
        os.environ["YUNQUE_S3_ENDPOINT"] = endpoint
    try:
        return args.fn(args)
    except Exception as e:
        from yunque import faults

        home = Path(os.environ["YUNQUE_HOME"]) if "://" not in os.environ.get("YUNQUE_HOME", "://") else None
        status = faults.report(args.command, e, home)
        if status is None:
            raise
        return status


if __name__ == "__main__":
    sys.exit(main())
