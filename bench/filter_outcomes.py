"""Kept and dropped documents per shard and per rule of a corpus, through the real read,
clean and filter stages in this process, for one language: the figures a change to the
rules is judged by (docs/languages.md gives them for the Spanish and French samples).

    python -m bench.filter_outcomes CORPUS --language fr [--profile docs] [--json OUT]

The language is passed as `filters.language` and `langid.language`, which every version
of the configuration accepts, so the same command measures the code before a change (run
from a checkout of it) and after.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path


def outcomes(corpus: str, language: str, profile: str = "docs") -> dict[str, dict]:
    """{shard: {"read", "kept", "drops": {stage/reason: n}}} after read, clean, filter."""
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.data.ingest import clean_stage, filter_stage, read_stage
    from stages.store.outputs import DataStore

    cfg = preset("tiny", {"filters.language": language, "langid.language": language, "filters.profile": profile})
    fs, root = open_corpus(corpus)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = DataStore(Path(tmp))
        for shard in list_shards(fs, root):
            read = read_stage(store, fs, root, shard, cfg)
            clean = clean_stage(store, shard.key, cfg)
            kept = filter_stage(store, shard.key, cfg)
            drops: Counter[str] = Counter()
            for stage, stats in (("read", read), ("clean", clean), ("filter", kept)):
                drops.update({f"{stage}/{r}": n for r, n in stats.drops.items()})
            out[shard.key] = {"read": read.docs_in + read.rejected, "kept": kept.docs_out, "drops": dict(drops)}
    return out


def table(result: dict[str, dict]) -> str:
    lines = [f"{'shard':<32}{'read':>7}{'kept':>7}  top drop reasons"]
    total: Counter[str] = Counter()
    for shard, r in result.items():
        top = ", ".join(f"{k} {n}" for k, n in Counter(r["drops"]).most_common(4))
        lines.append(f"{shard:<32}{r['read']:>7}{r['kept']:>7}  {top}")
        total.update(r["drops"])
    read, kept = sum(r["read"] for r in result.values()), sum(r["kept"] for r in result.values())
    lines.append(f"{'all':<32}{read:>7}{kept:>7}  " + ", ".join(f"{k} {n}" for k, n in total.most_common(8)))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus")
    p.add_argument("--language", default="es")
    p.add_argument("--profile", default="docs")
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()
    result = outcomes(args.corpus, args.language, args.profile)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
