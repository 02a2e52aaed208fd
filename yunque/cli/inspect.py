"""`yunque inspect rejected --reason R [--shard S] [-n N] [--stage STAGE]`: the documents a
rule threw away, in the terminal, to judge the rule before trusting it.
`yunque inspect pii [--shard S] [--kind K] [-n N]`: what the personal-data step found,
values masked in their context (found again in clean_documents, the only place they are).
`yunque inspect filters [--shard S] [--plot DIR]`: each rule's metric against its
threshold, over one shard or all pooled, as text histograms or PNGs.

Reads the home's side tables through `DataStore` (`--home`: a directory or an object store
URL). R matches a reason exactly or as a prefix. docs/data.md#quality-filters.
"""

from __future__ import annotations

import argparse
import posixpath
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from yunque import env

if TYPE_CHECKING:
    from stages.store.outputs import DataStore

STAGES = ("read", "clean", "filter", "dedup")


def _shards(store: DataStore, stage: str) -> list[str]:
    """Shards with a committed output of the asset that writes `stage`'s rejections."""
    from stages.store.outputs import MANIFEST, REJECTED_BY

    asset = REJECTED_BY[stage]
    if store.remote is not None:
        base = posixpath.join(store.remote.root, "data", asset)
        store.remote.fs.invalidate_cache(base)
        return sorted(posixpath.basename(posixpath.dirname(p))
                      for p in store.remote.fs.glob(posixpath.join(base, "*", MANIFEST)))
    root = store.data / asset
    return sorted(p.parent.name for p in root.glob(f"*/{MANIFEST}")) if root.is_dir() else []


def _tables(store: DataStore, shard: str | None, stages: tuple[str, ...]) -> list[Path]:
    paths = []
    for stage in stages:
        for s in [shard] if shard else _shards(store, stage):
            path = store.rejected(s, stage)
            if path.exists():
                paths.append(path)
    return paths


def matching(counts: Counter, wanted: str) -> list[str]:
    """Reasons equal to `wanted`, else those it is a prefix of."""
    if wanted in counts:
        return [wanted]
    return sorted(r for r in counts if r.startswith(wanted))


def cmd_rejected(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq  # loaded by the command, not by every `yunque` start

    from stages.reports.filters.report import sample, terminal_text
    from stages.store.outputs import DataStore

    env.use_home(args.home)
    store = DataStore(env.home_url())
    stages = (args.stage,) if args.stage else STAGES
    paths = _tables(store, args.shard, stages)
    where = f"shard {args.shard}" if args.shard else "any shard"
    if not paths:
        print(f"yunque inspect: no rejected documents of stage {'/'.join(stages)} in {where} of {env.home_url()} "
              "(nothing materialized there yet?)", file=sys.stderr)
        return 2
    counts: Counter = Counter()
    for p in paths:
        counts.update(pq.read_table(p, columns=["reason"])["reason"].to_pylist())
    reasons = matching(counts, args.reason)
    if not reasons:
        listing = "\n".join(f"  {r:<45} {c:>7,}" for r, c in counts.most_common())
        print(f"yunque inspect: no rejection reason {args.reason!r} in {where}; the reasons there:\n{listing}",
              file=sys.stderr)
        return 2
    rows = []
    for p in paths:  # only the matching rows' texts are read (predicate pushdown)
        table = pq.read_table(p, filters=[("reason", "in", reasons)])
        if table.num_rows:
            rows += sample(table, reasons, args.n, args.chars)
    rows = sorted(rows, key=lambda r: r["doc_id"])[: args.n]
    _values(store, rows)
    total = sum(counts[r] for r in reasons)
    shards = len({r["shard"] for r in rows})
    print(f"{', '.join(reasons)}: {total:,} documents rejected in {where}; {len(rows)} shown (smallest doc_ids"
          f"{f', from {shards} shards' if not args.shard else ''}), first {args.chars} characters each")
    print(terminal_text(rows))
    return 0


def cmd_filters(args: argparse.Namespace) -> int:
    from stages.reports.filters.report import pooled_report, render_histograms, text_histograms
    from stages.store.outputs import DataStore

    env.use_home(args.home)
    store = DataStore(env.home_url())
    shards = [args.shard] if args.shard else _shards(store, "filter")
    label = args.shard or f"{len(shards)} shards"
    report = pooled_report(store, shards, label) if shards else None
    if report is None:
        print(f"yunque inspect: no filter metrics for {f'shard {args.shard}' if args.shard else 'any shard'} in "
              f"{env.home_url()} (filtered_documents not materialized there yet?)", file=sys.stderr)
        return 2
    print(f"{label}: {report.docs_in:,} documents judged, {report.kept:,} kept")
    for text in text_histograms(report).values():
        print("\n" + text.replace("**", ""))
    if args.plot:
        for path in render_histograms(report, Path(args.plot)).values():
            print(f"wrote {path}")
    return 0


def cmd_pii(args: argparse.Namespace) -> int:
    """Per-kind totals per shard, then values found, masked, each in its redacted context."""
    from pipelines.data.pii import KINDS
    from stages.data.personal_data import redactions
    from stages.reports.personal_data import corpus_pii
    from stages.store.outputs import DataStore

    env.use_home(args.home)
    store = DataStore(env.home_url())
    shards = [args.shard] if args.shard else _shards(store, "filter")
    if not shards:
        print(f"yunque inspect: no filtered_documents in {env.home_url()} (nothing materialized there yet?)",
              file=sys.stderr)
        return 2
    if args.kind and args.kind not in KINDS:
        print(f"yunque inspect: unknown kind {args.kind!r}; choose one of {', '.join(KINDS)}", file=sys.stderr)
        return 2
    found = corpus_pii(store, shards)
    totals = {k: n for k, n in found.totals.items() if n}
    print(f"{len(shards)} shard(s): {sum(found.documents.values()):,} documents held personal data; "
          + (", ".join(f"{n:,} {k}" for k, n in totals.items()) or "no value found"))
    shown = 0
    for shard in shards:
        if shown >= args.n:
            break
        for s in redactions(store, shard, args.n - shown, args.kind):
            print(f"\n{s.shard} {s.source}  {s.kind}  {s.masked}\n  ...{s.context}...")
            shown += 1
    return 0


def _values(store: DataStore, rows: list[dict]) -> None:
    """The metric value and threshold that dropped each filter-stage row (from the shard's
    filter_metrics.parquet, committed with the rejections)."""
    import pyarrow.parquet as pq

    from stages.reports.filters.report import FILTER_METRICS, attach_values

    for shard in sorted({r["shard"] for r in rows if r["stage"] == "filter"}):
        path = store.dir("filtered_documents", shard) / FILTER_METRICS
        if path.exists():
            mine = [r for r in rows if r["shard"] == shard and r["stage"] == "filter"]
            by_reason: dict[str, list[dict]] = {}
            for r in mine:
                by_reason.setdefault(r["reason"], []).append(r)
            names = set(pq.read_schema(path).names)
            attach_values(by_reason, pq.read_table(path, columns=["doc_id", *(c for c in by_reason if c in names)]))


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="look at what the data stages threw away and why")
    what = p.add_subparsers(dest="what", required=True)
    r = what.add_parser("rejected", help="a sample of the documents rejected for a reason")
    r.add_argument("--reason", required=True,
                   help="a reason (gopher_quality:alpha_words_ratio) or its prefix (gopher_quality)")
    r.add_argument("--shard", help="one shard (default: every shard)")
    r.add_argument("-n", type=_positive, default=5, help="documents shown (default 5)")
    r.add_argument("--stage", choices=STAGES, help="the stage whose rejections to read (default: all)")
    r.add_argument("--chars", type=_positive, default=300, help="characters of each text (default 300)")
    r.set_defaults(fn=cmd_rejected)
    f = what.add_parser("filters", help="each quality rule's metric against its threshold, as histograms")
    f.add_argument("--shard", help="one shard (default: every shard, pooled)")
    f.add_argument("--plot", metavar="DIR", help="also draw one PNG per filter into DIR")
    f.set_defaults(fn=cmd_filters)
    q = what.add_parser("pii", help="personal data found per kind, and values masked in their redacted context")
    q.add_argument("--shard", help="one shard (default: every shard)")
    q.add_argument("--kind", help="one kind (email, phone, national_id, iban, card, ip_address, credential)")
    q.add_argument("-n", type=_positive, default=10, help="values shown (default 10)")
    q.set_defaults(fn=cmd_pii)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value

