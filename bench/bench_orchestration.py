"""The data half (read -> deduplicated documents) at N shards through the path users run,
beside the stage functions called directly: what orchestration costs.

    python -m bench.bench_orchestration --shards 10 100 1000 --docs-per-shard 1000 [--rounds 1] [--out DIR]

Each round runs `daemon` (`yunque run`), `in_process` (`--in-process`) and `direct` (the
stage functions in a pool of two processes) on fresh homes, then measures an up-to-date
rerun, the code location's import, the runs' own overheads and the UI's queries. Results:
<out>/results.json. docs/benchmarks.md#the-product-path-at-n-shards-bench_orchestration-issue-27.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import bench.common  # noqa: F401  (telemetry off for every child)

REPO = Path(__file__).resolve().parents[1]
YUNQUE = str(Path(sys.executable).with_name("yunque"))
SELECT = "*deduped_documents"


WORDS = ["archivo", "sistema", "usuario", "servidor", "paquete", "manual", "página", "equipo", "red", "correo", "tarea", "informe", "ventana", "opción", "mensaje", "respuesta", "problema", "solución", "memoria", "disco", "teclado", "pantalla", "versión", "registro", "copia", "configura", "instala", "actualiza", "revisa", "describe", "guarda", "abre", "cierra", "busca", "cambia", "mejora", "protege"]
STOP = ["de", "la", "que", "el", "en", "y", "a", "los", "del", "se", "las", "por", "un", "para", "con", "no", "una", "su", "al", "lo", "como", "más"]


def prose(rng: random.Random, paragraphs: int = 3) -> str:
    """Spanish-looking prose that passes the quality rules: stop words mixed in, sentences
    of 10-18 words ending in a full stop, no repeated n-grams to speak of."""
    out = []
    for _ in range(paragraphs):
        sentences = []
        for _ in range(4):
            words = [rng.choice(STOP) if rng.random() < 0.4 else rng.choice(WORDS) for _ in range(rng.randint(10, 18))]
            text = " ".join(words)
            sentences.append(text[0].upper() + text[1:] + ".")
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def write_corpus(root: Path, shards: int, docs: int) -> Path:
    done = root / "corpus.json"
    if done.exists() and json.loads(done.read_text()) == {"shards": shards, "docs": docs}:
        return root / "corpus"
    for i in range(shards):
        rng = random.Random(i)
        d = root / "corpus" / f"s{i:04d}"
        d.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"text": prose(rng)}, ensure_ascii=False) for _ in range(docs)]
        (d / "docs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done.write_text(json.dumps({"shards": shards, "docs": docs}))
    return root / "corpus"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YUNQUE_HOME", "DAGSTER_HOME"))}
    return {**env, "YUNQUE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}


def cli(home: Path, corpus: Path, *extra: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--select", SELECT, *extra],
                          cwd=REPO, env=_env(home), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"yunque run failed ({done.returncode}) on {home}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds, done.stdout


# --- the direct path: stage functions in a pool of processes ------------------------


def _shard_chain(home: str, corpus: str, shard: str) -> None:
    from pipelines.data.corpus import get_shard, open_corpus
    from stages.config import preset
    from stages.data import dedup, ingest
    from stages.store.outputs import DataStore

    cfg, store = preset("tiny"), DataStore(home)
    fs, root = open_corpus(corpus)
    ingest.read_stage(store, fs, root, get_shard(fs, root, shard), cfg)
    ingest.clean_stage(store, shard, cfg)
    ingest.filter_stage(store, shard, cfg)
    dedup.minhash_stage(store, shard, cfg)


def _deduped(home: str, shard: str) -> None:
    from stages.config import preset
    from stages.data import dedup
    from stages.store.outputs import DataStore

    dedup.deduped_stage(DataStore(home), shard, preset("tiny"))


def direct(home: Path, corpus: Path, jobs: int) -> float:
    from stages.config import preset
    from stages.data import dedup
    from stages.data.quality import quality_stage
    from stages.store.outputs import DataStore

    shards = sorted(p.name for p in corpus.iterdir() if p.is_dir())
    t0 = time.perf_counter()
    # spawned workers: this process has threads by now (Dagster, sqlite), and a forked child
    # of a threaded process can hang on a lock one of them held (seen: 2 of 100 shards done)
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        list(pool.map(_shard_chain, [str(home)] * len(shards), [str(corpus)] * len(shards), shards, chunksize=4))
    dedup.dedup_index_stage(DataStore(home), shards, preset("tiny"))
    quality_stage(DataStore(home), shards, preset("tiny"))
    with ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        list(pool.map(_deduped, [str(home)] * len(shards), shards, chunksize=4))
    return time.perf_counter() - t0


# --- what the daemon path's home says about its runs ---------------------------------


def run_figures(home: Path) -> dict:
    """Runs created and what each cost beyond its steps (`orchestration.costs`)."""
    from orchestration.costs import home_instance, run_costs

    return run_costs(home_instance(str(home / "dagster")))


def import_seconds(home: Path, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import assets.definitions"], cwd=REPO, env=_env(home), check=True,
                       capture_output=True)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 2)


PARTITIONS_QUERY = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  partitionKeysByDimension { name partitionKeys }
  assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions
    failedPartitions unmaterializedPartitions } } } } }"""
BACKFILLS_QUERY = """query { partitionBackfillsOrError(limit: 20) { ... on PartitionBackfills { results {
  id status numPartitions timestamp endTimestamp title isAssetBackfill
  assetBackfillData { rootTargetedPartitions { partitionKeys }
    assetBackfillStatuses { ... on AssetPartitionsStatusCounts { assetKey { path } numPartitionsTargeted
      numPartitionsInProgress numPartitionsMaterialized numPartitionsFailed } } } } } } }"""


def webserver_figures(home: Path, rounds: int = 5) -> dict:
    """Median response time of the UI's partitions and backfills queries, webserver warm."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                             "-w", str(REPO / "workspace.yaml")], cwd=REPO, env=_env(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/graphql"

    def ask(query: str, variables: dict | None = None) -> float:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        t0 = time.perf_counter()
        with urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"}),
                                    timeout=300) as r:
            out = json.loads(r.read())
        if "errors" in out:
            raise SystemExit(f"GraphQL error: {out['errors']}")
        return time.perf_counter() - t0

    try:
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise SystemExit("the webserver did not start")
                time.sleep(1)
        key = {"key": {"path": ["raw_documents"]}}
        ask(PARTITIONS_QUERY, key), ask(BACKFILLS_QUERY)  # warm: the code location is loaded
        parts = [ask(PARTITIONS_QUERY, key) for _ in range(rounds)]
        fills = [ask(BACKFILLS_QUERY) for _ in range(rounds)]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
    return {"partitions_query_s": round(statistics.median(parts), 3), "backfills_query_s": round(statistics.median(fills), 3)}


def peak_rss_mb() -> float:
    return max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
               resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def measure(n: int, args: argparse.Namespace) -> dict:
    base = Path(args.out) / f"n{n}"
    corpus = write_corpus(base, n, args.docs_per_shard)
    rows: list[dict] = []
    for r in range(args.rounds):
        order = list(args.paths)
        order = order[r % len(order):] + order[: r % len(order)]
        row: dict = {"round": r + 1, "order": order}
        for path in order:
            home = base / f"r{r}-{path}"
            if home.exists():
                subprocess.run(["rm", "-rf", str(home)], check=True)
            rss0 = peak_rss_mb()
            if path == "direct":
                row[path] = direct(home, corpus, args.jobs)
            else:
                seconds, _ = cli(home, corpus, *(["--in-process"] if path == "in_process" else []))
                row[path] = seconds
                row[f"{path}_runs"] = run_figures(home)["runs"]
            row[f"{path}_peak_rss_mb"] = round(peak_rss_mb(), 0) if peak_rss_mb() > rss0 else None
            print(f"  n={n} round {r + 1} {path}: {row[path]:.1f} s", flush=True)
        for path in ("daemon", "in_process"):
            if path in row and "direct" in row:
                row[f"overhead_{path}_over_direct"] = round(row[path] / row["direct"], 3)
        rows.append(row)
    home = base / "r0-daemon"
    figures = run_figures(home)
    again, _ = cli(home, corpus)
    figures |= {"up_to_date_rerun_s": round(again, 1), "up_to_date_rerun_runs": run_figures(home)["runs"] - figures["runs"],
                "import_definitions_s": import_seconds(home), **webserver_figures(home)}
    med = lambda k: round(statistics.median(r[k] for r in rows), 1)
    return {"shards": n, "documents": n * args.docs_per_shard, "rounds": rows,
            "median_s": {p: med(p) for p in args.paths},
            "overhead": {f"{p}_over_direct": [r[f"overhead_{p}_over_direct"] for r in rows]
                         for p in ("daemon", "in_process") if f"overhead_{p}_over_direct" in rows[0]},
            "daemon_home": figures}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--docs-per-shard", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes of the direct path (the run queue's limit)")
    ap.add_argument("--out", default="/tmp/bench_orchestration")
    ap.add_argument("--paths", nargs="+", default=["daemon", "in_process", "direct"],
                    choices=["daemon", "in_process", "direct"], help="the daemon path is always measured")
    args = ap.parse_args(argv)
    if "daemon" not in args.paths:
        ap.error("--paths must include daemon (the home the later figures are read from)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.shards:
        res = measure(n, args)
        results.append(res)
        (Path(args.out) / "results.json").write_text(json.dumps(results, indent=1))
        m, f = res["median_s"], res["daemon_home"]
        print(f"{n} shards, {res['documents']:,} documents: daemon {m['daemon']} s ({f['runs']} runs), "
              f"in-process {m.get('in_process')} s, direct {m.get('direct')} s; overhead {res['overhead']}; "
              f"up to date: {f['up_to_date_rerun_s']} s "
              f"({f['up_to_date_rerun_runs']} runs); import {f['import_definitions_s']} s; launched -> run start "
              f"{f['launched_to_run_start_s']} s, run start -> first step "
              f"{f['run_start_to_first_step_s']} s, last step -> run end {f['last_step_to_run_end_s']} s; "
              f"partitions query {f['partitions_query_s']} s, backfills query {f['backfills_query_s']} s", flush=True)


if __name__ == "__main__":
    main()
