"""Read -> dedup at scale: N synthetic documents through the real stage functions, one
subprocess per stage and shard, with throughput, peak RSS and planted-pair recall/precision.

    python -m bench.bench_scale --n 100000 [1000000 ...] [--jobs 2] [--out /tmp/work/scale]

For each N: the corpus (bench.scale_corpus), then every data stage on a fresh home with
the `tiny` preset, at most --jobs processes at once. Resumable: a cached job keeps the
figures measured when it ran. Results: <out>/results.json and <out>/results.md (scores:
bench.scale_score). docs/benchmarks.md#read-to-dedup-at-1m-documents-bench_scale.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench.common  # noqa: F401  (telemetry off for the workers too)
from bench.scale_corpus import CorpusSpec, default_shards

PER_SHARD = ("read", "clean", "filter", "minhash")
STAGES = (*PER_SHARD, "dedup_index", "quality", "deduped")
ASSET = {"read": "raw_documents", "clean": "clean_documents", "filter": "filtered_documents",
         "minhash": "minhash_signatures", "dedup_index": "dedup_index",
         "quality": "quality_model", "deduped": "deduped_documents"}
_print_lock = threading.Lock()


def say(msg: str) -> None:
    with _print_lock:
        print(time.strftime("%H:%M:%S"), msg, flush=True)


# --- the worker: one stage on one shard, in its own process -------------------------


def worker(stage: str, home: str, corpus: str, shard: str | None, band: int | None) -> dict:
    from stages.config import preset
    from stages.data import dedup, ingest
    from stages.store.outputs import DataStore

    cfg = preset("tiny")
    store = DataStore(home)
    base = _status_mb("VmRSS:")  # the interpreter and its imports, before any work
    if stage == "read":
        from pipelines.data.corpus import get_shard, open_corpus

        fs, root = open_corpus(corpus)
        stats = ingest.read_stage(store, fs, root, get_shard(fs, root, shard), cfg)
    elif stage == "clean":
        stats = ingest.clean_stage(store, shard, cfg)
    elif stage == "filter":
        stats = ingest.filter_stage(store, shard, cfg)
    elif stage == "minhash":
        stats = dedup.minhash_stage(store, shard, cfg)
    elif stage == "dedup_band":
        return band_worker(store, shards_of(corpus), band) | {"base_rss_mb": base}
    elif stage == "dedup_index":
        stats = dedup.dedup_index_stage(store, shards_of(corpus), cfg)
    elif stage == "quality":
        from stages.data.quality import quality_stage

        stats = quality_stage(store, shards_of(corpus), cfg)
    elif stage == "deduped":
        stats = dedup.deduped_stage(store, shard, cfg)
    else:
        raise SystemExit(f"unknown stage {stage}")
    out = stats.to_json()
    out["cached"] = stats.cached
    out["peak_rss_mb"] = peak_rss_mb()
    out["base_rss_mb"] = base
    out.get("extra", {}).pop("shard_digests", None)  # per-shard noise in the results
    out.get("extra", {}).pop("shard_inputs", None)
    return out


def band_worker(store, shards: list[str], band: int) -> dict:
    """One LSH band of the index on its own, as `build_index` runs it (`band_job`: read
    that band's key column of every shard, key range by key range, sort, link buckets,
    write the band): its peak RSS is the index's memory per band."""
    import tempfile

    import pyarrow.parquet as pq

    from pipelines.data.dedup.lsh_index import band_job  # type: ignore[attr-defined]
    from stages.config import preset

    paths = [store.part("minhash_signatures", s) for s in shards]
    lens = [pq.ParquetFile(p).metadata.num_rows for p in paths]
    starts = [sum(lens[:i]) for i in range(len(lens))]
    with tempfile.TemporaryDirectory(dir=store.staging()) as tmp:
        a, _ = band_job(paths, starts, band, Path(tmp) / "band.parquet",
                        budget=preset("tiny").dedup.band_partition_rows)
    return {"key": f"band{band}", "docs_in": sum(lens), "docs_out": sum(lens), "bytes_in": 0, "cached": False,
            "extra": {"edges": int(a.size)}, "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: of its own address space since exec, so not the
    harness's memory that fork copied) or, if larger, that of a child it waited for."""
    import resource

    return round(max(_status_mb("VmHWM:"), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024), 1)


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def shards_of(corpus: str) -> list[str]:
    return sorted(p.name for p in Path(corpus).iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


# --- the harness ----------------------------------------------------------------------


def run_job(stage: str, home: Path, corpus: Path, logs: Path, shard: str | None, band: int | None = None,
            code: str | None = None) -> dict:
    """Run one worker process; its wall and CPU time (with its waited-for children) and peak RSS.

    Output goes to a log file, not a pipe, so that nothing but `os.wait4` reaps the child
    (Popen.communicate would, and its rusage would be lost). The peak RSS is the one the
    worker reports (`peak_rss_mb`): wait4's ru_maxrss would include the harness's own
    pages, which the kernel counts into a forked child's high-water mark before exec."""
    cmd = [sys.executable, "-m", "bench.bench_scale", "worker", stage, "--home", str(home), "--corpus", str(corpus)]
    if shard is not None:
        cmd += ["--shard", shard]
    if band is not None:
        cmd += ["--band", str(band)]
    name = "-".join(x for x in (stage, shard, None if band is None else f"band{band:02d}") if x)
    log = logs / f"{name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=code)
        _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: keep Popen from waiting again
    wall = time.perf_counter() - t0
    lines = log.read_text().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed ({proc.returncode}), see {log}:\n" + "\n".join(lines[-30:]))
    stats = json.loads(lines[-1])
    return {"stage": stage, "shard": shard, "band": band, "wall_s": round(wall, 2),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 2), "rss_mb": stats.pop("peak_rss_mb"),
            "base_rss_mb": stats.pop("base_rss_mb", 0.0), "stats": stats}


class Measures:
    """Per-job figures of one N, kept across runs under (job name, cache key)."""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict = json.loads(path.read_text()) if path.exists() else {}

    def record(self, job: dict) -> dict:
        name = f"{job['stage']}:{job['shard'] or ''}:{'' if job['band'] is None else job['band']}"
        with _print_lock:  # jobs finish on several threads
            old = self.data.get(name)
            if job["stats"].get("cached") and old and old["stats"]["key"] == job["stats"]["key"]:
                return old  # came back from the cache: the figures are those of the run that computed it
            self.data[name] = job
            self.path.write_text(json.dumps(self.data, indent=1))
            return job


def run_stage(stage: str, jobs: list[dict], meas: Measures, home: Path, corpus: Path, logs: Path,
              parallel: int, code: str | None = None) -> dict:
    """Run a stage's jobs, `parallel` at a time; the stage's figures."""
    t0 = time.perf_counter()
    done: list[dict] = []

    def one(j: dict) -> dict:
        r = meas.record(run_job(stage if j.get("band") is None else "dedup_band", home, corpus, logs,
                                j.get("shard"), j.get("band"), code))
        s = r["stats"]
        with _print_lock:
            done.append(r)
        what = j.get("shard") or (f"band {j['band']}" if j.get("band") is not None else "corpus")
        say(f"  {stage:<11} {what:<8} {s['docs_in']:>9,} docs  {r['wall_s']:>7.1f} s  {r['rss_mb']:>7.0f} MB"
            f"{'  (cached)' if s.get('cached') else ''}  [{len(done)}/{len(jobs)}]")
        return r

    with ThreadPoolExecutor(max(1, parallel)) as pool:
        results = list(pool.map(one, jobs))
    elapsed = time.perf_counter() - t0
    if any(r["stats"].get("cached") for r in results):
        elapsed = sum(r["wall_s"] for r in results) / max(1, min(parallel, len(results)))  # estimate
    # a band job reads every document (one column of it); shard jobs split them
    total = max if stage == "dedup_band" else sum
    return {"stage": stage, "jobs": len(results), "docs_in": total(r["stats"]["docs_in"] for r in results),
            "docs_out": total(r["stats"]["docs_out"] for r in results),
            "bytes_in": sum(r["stats"].get("bytes_in", 0) for r in results),
            "elapsed_s": round(elapsed, 1), "cpu_s": round(sum(r["cpu_s"] for r in results), 1),
            "peak_rss_mb": max(r["rss_mb"] for r in results),
            "peak_above_base_mb": max(round(r["rss_mb"] - _base(r), 1) for r in results),
            "results": results}


def _base(job: dict) -> float:
    return job.get("base_rss_mb") or job["stats"].get("base_rss_mb", 0.0)


def run_n(n: int, args: argparse.Namespace) -> dict:
    base = Path(args.out) / f"n{n}"
    spec = CorpusSpec(n_docs=n, shards=args.shards or default_shards(n), seed=args.seed)
    say(f"== N = {n:,}: corpus under {base}")
    t0 = time.perf_counter()
    # In its own process, so the harness (whose pages every forked worker starts with) stays small.
    subprocess.run([sys.executable, "-m", "bench.scale_corpus", "--n", str(n), "--shards", str(spec.shards),
                    "--seed", str(spec.seed), "--out", str(base)], check=True, cwd=args.code)
    meta = json.loads((base / "corpus_meta.json").read_text())
    gen_s = time.perf_counter() - t0
    # One home per code version: the stages' cache keys do not see every code change.
    run_dir = base / args.label
    home, corpus, logs = run_dir / "home", base / "corpus", run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    meas = Measures(run_dir / "measure.json")
    shards = meta["shards"]
    stages: dict[str, dict] = {}
    for stage in STAGES:
        if stage not in args.stages:
            continue
        say(f"{stage} ({len(shards)} shards)" if stage not in ("dedup_index", "quality") else f"{stage} (whole corpus)")
        if stage == "dedup_index":
            bands = band_jobs(args.code)
            if bands:
                stages["dedup_band"] = run_stage("dedup_band", bands, meas, home, corpus, logs, args.jobs, args.code)
            jobs = [{}]
        elif stage == "quality":
            jobs = [{}]
        else:
            jobs = [{"shard": s} for s in shards]
        stages[stage] = run_stage(stage, jobs, meas, home, corpus, logs, args.jobs, args.code)
    fill_bytes(stages)
    from bench.scale_score import score

    result = {"n": n, "label": args.label, "code": args.code or os.getcwd(), "corpus": meta, "generate_s": round(gen_s, 1), "stages": stages}
    if "deduped" in stages:
        say("scoring the planted pairs")
        result["score"] = score(home, base / "truth.parquet", seed=args.seed)
        say(f"  {json.dumps(result['score'])}")
    return result


def band_jobs(code: str | None) -> list[dict]:
    """One job per LSH band when the code under test builds bands on their own."""
    probe = ("from stages.config import preset; import importlib.util as u; "
             "print(preset('tiny').dedup.bands if u.find_spec('pipelines.data.dedup.lsh_index') else 0)")
    bands = int(subprocess.run([sys.executable, "-c", probe], cwd=code, check=True, capture_output=True,
                               text=True).stdout.split()[-1])
    return [{"band": b} for b in range(bands)]


def fill_bytes(stages: dict[str, dict]) -> None:
    """Stages that do not count bytes (minhash, the index) read what filter wrote."""
    filtered = stages.get("filter", {}).get("results", [])
    out = sum(r["stats"].get("bytes_out", 0) for r in filtered)
    for name in ("minhash", "dedup_band", "dedup_index"):
        if name in stages and not stages[name]["bytes_in"]:
            stages[name]["bytes_in"] = out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000])
    ap.add_argument("--shards", type=int, default=0, help="default: about 62k documents a shard, 8 to 16")
    ap.add_argument("--jobs", type=int, default=2, help="processes at once (shards are independent)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--out", default="/tmp/work/scale")
    ap.add_argument("--code", help="run the stages of the repository copy in this directory (default: this one)")
    ap.add_argument("--label", default="worktree", help="names the run's home and results (one per code version)")
    args = ap.parse_args(argv)
    from bench.scale_report import write_results

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for n in args.n:
        write_results(out, run_n(n, args))
    say(f"results: {out / 'results.md'} and {out / 'results.json'}")


def worker_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stage")
    ap.add_argument("--home", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--shard")
    ap.add_argument("--band", type=int)
    a = ap.parse_args(argv)
    print(json.dumps(worker(a.stage, a.home, a.corpus, a.shard, a.band), default=str), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker_main(sys.argv[2:])
    else:
        main()
