"""resiliparse vs trafilatura on the sample corpus's HTML, side by side, same process.

    python -m bench.compare_extractors --corpus DIR [--limit N] [--shards a,b/c,...] [--rounds 3]

For each shard (a folder under DIR; default: libreoffice-help-es, debian-reference-es and
the es-ES part of debian-handbook) it prints, per extractor: documents/s (extraction only,
files already in memory; the two run in interleaved rounds, and the median, the per-round
speed ratio and its spread are shown), mean output characters, empty-output rate, and a
boilerplate proxy: the share of output lines (>= 20 chars) that occur in >= 5% of the shard's
documents (menus, footers, navigation repeated across pages). Then a few lines each
extractor keeps that the other drops: the most frequent ones (systematic differences) and
a few one-off ones (content). Output text goes through `normalize_text` as in the pipeline.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Rounds, Spread, interleaved  # (importing it sets the telemetry switches)
from pipelines.data.extract import EXTRACTORS, html_to_text, normalize_text

DEFAULT_SHARDS = ("libreoffice-help-es", "debian-reference-es", "debian-handbook/es-ES")
MIN_LINE = 20  # shorter lines (headings, "Véase también") are too generic to be evidence
REPEAT_SHARE = 0.05  # a line in >= 5% of a shard's documents counts as boilerplate
_WS = re.compile(r"\s+")
# The extractors format lists and tables differently (resiliparse "• a", tab-separated cells;
# trafilatura "- a", "| a | b |" rows): markers are removed before lines are compared.
_BULLET = re.compile(r"^(?:[•\-*]|\d+\.)\s+")
_TABLE = re.compile(r"[|]|^-{3,}$|(?<=\|)-{3,}")


def _canon(text: str) -> str:
    return _WS.sub(" ", _TABLE.sub(" ", text)).strip()


@dataclass
class Result:
    seconds: float = 0.0
    texts: list[str] = field(default_factory=list)


def _lines(text: str) -> list[str]:
    """Output lines worth comparing, canonicalised (whitespace, bullets, table pipes)."""
    lines = (_BULLET.sub("", _canon(line)) for line in text.splitlines())
    return [line for line in lines if len(line) >= MIN_LINE]


def load_html(root: Path, limit: int | None, seed: int = 0) -> tuple[list[str], list[str]]:
    """(paths, html) of every .html under root (dot entries skipped), or a fixed sample."""
    paths = sorted(
        p
        for p in root.rglob("*")
        if p.suffix in (".html", ".htm")
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if limit and len(paths) > limit:
        paths = sorted(random.Random(seed).sample(paths, limit))
    return [str(p.relative_to(root)) for p in paths], [
        p.read_text(encoding="utf-8", errors="replace") for p in paths
    ]


def run_extractors(pages: list[str], rounds: int) -> tuple[dict[str, Result], Rounds]:
    """Both extractors on every page, in `rounds` interleaved rounds (bench.common): a slow
    spell of the shared machine then hits both alike. Output from the last round."""
    for e in EXTRACTORS:
        html_to_text("<html><body><p>warm up</p></body></html>", e)  # imports, config caches
    r = interleaved({e: lambda e=e: [html_to_text(h, e) for h in pages] for e in EXTRACTORS}, rounds, warmup=0)
    return {e: Result(seconds=statistics.median(r.seconds(e)), texts=[normalize_text(t) for t in r.last[e]])
            for e in EXTRACTORS}, r


def boilerplate_share(texts: list[str]) -> tuple[float, set[str]]:
    """Share of output lines that are repeated across >= REPEAT_SHARE of the documents."""
    per_doc = [_lines(t) for t in texts]
    df = Counter(line for lines in per_doc for line in set(lines))
    threshold = max(2, math.ceil(REPEAT_SHARE * len(texts)))
    repeated = {line for line, n in df.items() if n >= threshold}
    total = sum(len(lines) for lines in per_doc)
    hits = sum(1 for lines in per_doc for line in lines if line in repeated)
    return (hits / total if total else 0.0), repeated


def only_in(a: list[str], b: list[str]) -> Counter[str]:
    """Lines of a's output (per document) that appear nowhere in b's output of that document.

    A substring test against b's whole text with all whitespace removed, so a line that b
    merely wrapped, joined or spaced differently ("disco sdf" vs "discosdf") does not count.
    """
    out: Counter[str] = Counter()
    for ta, tb in zip(a, b, strict=True):
        flat_b = _WS.sub("", _canon(tb))
        out.update(line for line in set(_lines(ta)) if _WS.sub("", line) not in flat_b)
    return out


def _show(label: str, counts: Counter[str], n_docs: int, k: int) -> None:
    frequent = [(line, n) for line, n in counts.most_common(k) if n > 1]
    rare = [line for line, n in counts.items() if n == 1]
    rare = random.Random(1).sample(rare, min(k, len(rare)))
    print(f"  {label}: {len(counts)} distinct lines")
    for line, n in frequent:
        print(f"    [{n}/{n_docs} docs] {line[:110]}")
    for line in rare:
        print(f"    [1 doc] {line[:110]}")


def compare_shard(name: str, root: Path, limit: int | None, examples: int, rounds: int) -> dict[str, dict]:
    _, pages = load_html(root, limit)
    if not pages:
        print(f"\n== {name}: no HTML under {root}, skipped")
        return {}
    mb = sum(len(p.encode("utf-8")) for p in pages) / 1e6
    print(f"\n== {name}: {len(pages)} documents, {mb:.1f} MB of HTML")
    results, timing = run_extractors(pages, rounds)
    a, b = EXTRACTORS
    timing.report(b, "docs/s", work=len(pages), title=f"  {rounds} interleaved rounds ({b} seconds / {a} seconds, "
                  f"> 1: {a} faster):")
    stats: dict[str, dict] = {}
    print(f"  {'extractor':<12} {'docs/s':>9} {'mean chars':>11} {'empty':>7} {'boilerplate':>12}")
    for e, r in results.items():
        share, _ = boilerplate_share(r.texts)
        stats[e] = {
            "docs": len(pages),
            "seconds": r.seconds,
            "docs_per_s": len(pages) / r.seconds if r.seconds else float("inf"),
            "mean_chars": sum(map(len, r.texts)) / len(pages),
            "empty": sum(1 for t in r.texts if not t) / len(pages),
            "boilerplate": share,
        }
        s = stats[e]
        print(
            f"  {e:<12} {s['docs_per_s']:>9.1f} {s['mean_chars']:>11.0f} "
            f"{s['empty']:>7.1%} {s['boilerplate']:>12.1%}"
        )
    print(f"  speed ratio {a}/{b}: {timing.ratio(a, b).fmt()}")
    for e in EXTRACTORS:
        stats[e]["round_seconds"] = timing.seconds(e)
    _show(
        f"kept by {a}, dropped by {b}",
        only_in(results[a].texts, results[b].texts),
        len(pages),
        examples,
    )
    _show(
        f"kept by {b}, dropped by {a}",
        only_in(results[b].texts, results[a].texts),
        len(pages),
        examples,
    )
    return stats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True, help="folder with one dir per shard")
    ap.add_argument("--limit", type=int, default=None, help="documents per shard (sampled)")
    ap.add_argument(
        "--shards", default=",".join(DEFAULT_SHARDS), help="comma-separated folders under --corpus"
    )
    ap.add_argument("--examples", type=int, default=3, help="example lines of each kind")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per shard")
    args = ap.parse_args(argv)

    totals = {
        e: {"docs": 0, "seconds": 0.0, "chars": 0.0, "empty": 0.0, "bp": 0.0} for e in EXTRACTORS
    }
    per_round: dict[str, list[float]] = {e: [0.0] * args.rounds for e in EXTRACTORS}
    for shard in args.shards.split(","):
        for e, s in compare_shard(shard, args.corpus / shard, args.limit, args.examples, args.rounds).items():
            t = totals[e]
            t["docs"] += s["docs"]
            t["seconds"] += s["seconds"]
            t["chars"] += s["mean_chars"] * s["docs"]
            t["empty"] += s["empty"] * s["docs"]
            t["bp"] += s["boilerplate"] * s["docs"]  # document-weighted mean of shard shares
            per_round[e] = [x + y for x, y in zip(per_round[e], s["round_seconds"])]
    print("\n== all shards (docs/s from the sum of the shards' median seconds)")
    for e, t in totals.items():
        if t["docs"]:
            n = t["docs"]
            print(
                f"  {e:<12} {n / t['seconds']:>9.1f} docs/s {t['chars'] / n:>9.0f} mean chars "
                f"{t['empty'] / n:>7.1%} empty {t['bp'] / n:>7.1%} boilerplate"
            )
    a, b = EXTRACTORS
    if totals[a]["docs"] and totals[b]["docs"]:
        # round r of every shard ran under about the same load: sum them, then compare
        ratio = Spread.of([tb / ta for ta, tb in zip(per_round[a], per_round[b])])
        print(f"  {a} vs {b}, all shards, per round: {ratio.fmt()} (> 1: {a} faster)")

if __name__ == "__main__":
    main()
