"""The dedup index's peak memory against the corpus size, on synthetic signature files:
the slope that says how many documents fit in a memory budget.

    python -m bench.bench_index_memory --docs 1000000 3000000 [--shards 200] [--code DIR ...]

For each N it writes N documents' signature files, shaped as the real stage writes them
with planted near-duplicates and shared paragraphs, builds the index in a fresh process per
code checkout, and reports wall time, peak RSS, the fitted slope and its prediction at 10M.
docs/benchmarks.md#the-dedup-indexs-memory-against-n-bench_index_memory-issue-27.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def write_shards(root: Path, docs: int, shards: int, seed: int = 0) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.data.dedup.lsh_index import band_column
    from stages.config import preset

    bands = preset("tiny", {}).dedup.bands
    done = root / "spec.json"
    spec = {"docs": docs, "shards": shards, "seed": seed}
    paths = [root / f"s{i:05d}.parquet" for i in range(shards)]
    if done.exists() and json.loads(done.read_text()) == spec:
        return paths
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per = -(-docs // shards)
    for i, path in enumerate(paths):
        n = min(per, docs - i * per)
        keys = rng.integers(1, 2**63, size=(n, bands), dtype=np.int64).astype(np.uint64)
        dup = rng.random(n) < 0.02  # near-duplicates of the row before them, in every band
        dup[0] = False
        keys[dup] = keys[np.flatnonzero(dup) - 1]
        paras = rng.integers(1, 2**63, size=(n, 3), dtype=np.int64).astype(np.uint64)
        shared = rng.random(n) < 0.05
        shared[0] = False
        paras[shared, 0] = paras[np.flatnonzero(shared) - 1, 0]
        ids = [f"{x:032x}" for x in rng.integers(0, 2**63, size=n, dtype=np.int64)]
        table = pa.table({
            "doc_id": pa.array(ids, pa.string()),
            "source": pa.array([f"s{i:05d}/docs.jsonl:{j}" for j in range(n)], pa.string()),
            **{band_column(b): pa.array(keys[:, b], pa.uint64()) for b in range(bands)},
            "paragraph_hashes": pa.array(list(paras), pa.list_(pa.uint64())),
            "line_chars": pa.array(list(rng.integers(40, 400, size=(n, 3), dtype=np.int32)), pa.list_(pa.int32())),
        })
        pq.write_table(table, path)
    done.write_text(json.dumps(spec))
    return paths


WORKER = """
import json, sys, time, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pipelines.data.dedup.index import ShardInput, build_index
from stages.config import preset
cfg = preset("tiny", {}).dedup
paths = [Path(p) for p in sys.argv[2:]]
inputs = [ShardInput(p.stem, p, p.stem) for p in paths]
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as out:
    res = build_index(inputs, cfg, Path(out))
seconds = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
print(json.dumps({"seconds": round(seconds, 1), "peak_rss_mb": round(hwm, 1), "docs": res.docs,
                  "removed": res.removed, "paragraph_docs": res.paragraph_docs}))
"""


def measure(code: Path, paths: list[Path]) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER, str(code), *map(str, paths)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"build_index failed under {code}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--shards", type=int, default=200)
    ap.add_argument("--code", nargs="+", default=[str(REPO)], help="checkouts to measure, side by side")
    ap.add_argument("--out", default="/tmp/bench_index_memory")
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {c: [] for c in args.code}
    for n in args.docs:
        t0 = time.perf_counter()
        paths = write_shards(Path(args.out) / f"n{n}", n, args.shards)
        print(f"{n:,} documents in {args.shards} signature files ({time.perf_counter() - t0:.0f} s to write)",
              flush=True)
        for code in args.code:  # each checkout in turn on the same files
            r = measure(Path(code), paths)
            results[code].append({"docs": n, **r})
            print(f"  {code}: {r['seconds']} s, peak RSS {r['peak_rss_mb']:,.0f} MB ({r['removed']:,} near-duplicates "
                  f"removed, {r['paragraph_docs']:,} documents losing a paragraph)", flush=True)
    summary = {}
    for code, rows in results.items():
        if len(rows) >= 2:
            x = np.array([r["docs"] for r in rows], float) / 1e6
            y = np.array([r["peak_rss_mb"] for r in rows], float)
            slope, intercept = np.polyfit(x, y, 1)
            summary[code] = {"mb_per_million_docs": round(slope, 1), "intercept_mb": round(intercept, 1),
                             "predicted_10m_mb": round(intercept + 10 * slope, 0)}
            print(f"{code}: {slope:,.0f} MB per million documents + {intercept:,.0f} MB: "
                  f"{intercept + 10 * slope:,.0f} MB predicted at 10M documents")
    Path(args.out, "results.json").write_text(json.dumps({"runs": results, "fit": summary}, indent=1))


if __name__ == "__main__":
    main()
