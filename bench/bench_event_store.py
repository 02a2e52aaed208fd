"""What one Dagster event costs in each instance storage: a materialization stored (what a
batch step writes per shard and asset), and the latest materialization's id looked up (the
provenance and check target of every shard), side by side in interleaved rounds.

    python -m bench.bench_event_store [--events 300] [--rounds 5]
        [--postgres-url postgresql://...] [--pgbouncer-url postgresql://...]

Cases: `dagster_sqlite`, Dagster's own sqlite event log (an engine opened and disposed of
per statement); `pooled_sqlite`, ours (resources/sqlite_storage.py, the embedded default);
with the URLs, `postgres`, Dagster's Postgres event log on a server, and `pgbouncer`, the
same through a connection pooler in front of it (session pooling).
docs/benchmarks.md#dagsters-bookkeeping-bench_orchestration-issue-44.
"""

from __future__ import annotations

import argparse

import bench.common  # noqa: F401  (telemetry off)
from bench.common import Clocked, Spread, interleaved


def _case(storage, n: int, lookups: list[float]):
    from orchestration.event_costs import store_then_look_up

    def run() -> Clocked:
        stored, looked = store_then_look_up(storage, n)
        lookups.append(looked / n * 1000)
        return Clocked(stored, n)

    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--postgres-url", help="a Postgres database Dagster may create its tables in")
    ap.add_argument("--pgbouncer-url", help="the same database through a pooler (pgbouncer, session pooling)")
    args = ap.parse_args(argv)
    from orchestration.event_costs import storages as open_storages

    storages = open_storages(args.postgres_url, args.pgbouncer_url)
    lookups: dict[str, list[float]] = {name: [] for name in storages}
    rounds = interleaved({name: _case(s, args.events, lookups[name]) for name, s in storages.items()},
                         rounds=args.rounds)
    lookups = {name: got[1:] for name, got in lookups.items()}  # the warm-up call's left out
    print(f"{args.events} materialization events stored, then as many latest-id look-ups, per round:")
    for name in storages:
        per_event = Spread.of([t / args.events * 1000 for t in rounds.seconds(name)])
        print(f"  {name}: store {per_event.fmt('.2f', 'ms')}; look-up {Spread.of(lookups[name]).fmt('.2f', 'ms')}")
    rounds.versus("pooled_sqlite", "dagster_sqlite", "pooled sqlite vs Dagster's sqlite, storing")
    if "pgbouncer" in storages and "postgres" in storages:
        rounds.versus("pgbouncer", "postgres", "through pgbouncer vs straight to Postgres, storing")


if __name__ == "__main__":
    main()
