"""Shared pieces of the benchmarks: texts from a stage's parquet output, a small tokenizer,
and interleaved side-by-side timing (`interleaved`, `Rounds`)."""

from __future__ import annotations

import glob
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

for _k, _v in {
    "DAGSTER_DISABLE_TELEMETRY": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "AWS_EC2_METADATA_DISABLED": "true",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ.setdefault(_k, _v)


def yunque_home() -> str:
    return os.environ.get("YUNQUE_HOME", os.path.abspath(".yunque"))


def default_glob(asset: str) -> str:
    return os.path.join(yunque_home(), "data", asset, "*", "*.parquet")


def load_texts(pattern: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(doc_ids, texts) from every parquet file matching `pattern`, in a stable order."""
    import polars as pl

    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(
            f"no parquet files match {pattern}; run `yunque run` first (or pass --input)"
        )
    df = pl.concat([pl.read_parquet(f, columns=["doc_id", "text"]) for f in files])
    if limit:
        df = df.head(limit)
    return df["doc_id"].to_list(), df["text"].to_list()


@contextmanager
def timed(label: str, out: dict[str, float]) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    out[label] = time.perf_counter() - t0


def small_tokenizer(root: Path, vocab: int = 400) -> Path:
    """A byte-level BPE tokenizer trained on generated Spanish word problems, saved as the
    tokenizer asset saves it (for benchmarks that need a checkpoint, not a corpus)."""
    from pipelines.tasks.math_tasks import reference_completion, spanish_problems
    from pipelines.tokens.tokenizer import save_pretrained, train_bpe

    texts = [f"{p.question} {reference_completion(p)}" for p in spanish_problems(300, "train", "add2", 0)]
    directory = root / "tokenizer"
    save_pretrained(train_bpe(texts, vocab), directory, max_length=64)
    return directory


# --- interleaved side-by-side timing ---------------------------------------------------
# On a shared machine a slow spell that hits one side only (all of ours, then all of
# theirs) turns into a fake speed ratio. Running the cases round by round, in a rotating
# order, makes each round a side-by-side comparison under the same load; the spread of the
# per-round ratios then says how far the figure can be trusted.


@dataclass(frozen=True)
class Spread:
    """Median, range and interquartile range of per-round values."""

    median: float
    lo: float
    hi: float
    q1: float
    q3: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = sorted(values)
        if len(v) < 2:
            return cls(v[0], v[0], v[0], v[0], v[0])
        q1, _, q3 = statistics.quantiles(v, n=4, method="inclusive")
        return cls(statistics.median(v), v[0], v[-1], q1, q3)

    def fmt(self, spec: str = ".2f", unit: str = "x") -> str:
        """As in "median 1.23x (range 1.01-1.40, IQR 1.15-1.30)": the unit once, after the median."""
        sep = " " if len(unit) > 1 else ""
        return (f"median {self.median:{spec}}{sep}{unit} (range {self.lo:{spec}}-{self.hi:{spec}}, "
                f"IQR {self.q1:{spec}}-{self.q3:{spec}})")


@dataclass
class Rounds:
    """Seconds per case per round (`times[r][case]`), the order each round ran in, and
    each case's return value from the last round (for correctness checks)."""

    times: list[dict[str, float]] = field(default_factory=list)
    orders: list[list[str]] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)

    @property
    def cases(self) -> list[str]:
        return list(self.times[0]) if self.times else []

    def seconds(self, case: str) -> list[float]:
        return [t[case] for t in self.times]

    def ratios(self, case: str, baseline: str) -> list[float]:
        """Per round: baseline seconds / case seconds, i.e. how many times faster `case` is
        than `baseline` in that round (> 1: faster)."""
        return [t[baseline] / t[case] for t in self.times]

    def ratio(self, case: str, baseline: str) -> Spread:
        return Spread.of(self.ratios(case, baseline))

    def report(self, baseline: str, unit: str = "items/s", work: float | Mapping[str, float] | None = None,
               title: str = "", compare: Sequence[str] | None = None) -> None:
        """One line per round (seconds of each case, in the order they ran, and the speed of
        each case in `compare` (default: all but the baseline) relative to `baseline` in that
        round), then the median ratio with its spread and, if `work` (items per call, one
        number, or one per case for the cases to show) is given, median throughputs."""
        others = list(compare) if compare is not None else [c for c in self.cases if c != baseline]
        if title:
            print(title)
        for r, (t, order) in enumerate(zip(self.times, self.orders)):
            secs = "  ".join(f"{c} {t[c]:.3f}s" for c in order)
            rel = "  ".join(f"{c}/{baseline} {t[baseline] / t[c]:.2f}x" for c in others)
            print(f"  round {r + 1}: {secs}" + (f" | {rel}" if rel else ""))
        for c in others:
            print(f"  {c} vs {baseline}: {self.ratio(c, baseline).fmt()} over {len(self.times)} rounds "
                  f"(> 1: {c} faster)")
        if work is not None:
            for c in self.cases:
                w = work.get(c) if isinstance(work, Mapping) else work
                if w is not None:
                    print(f"  {c}: {Spread.of([w / s for s in self.seconds(c)]).fmt(',.1f', unit)}")

    def fastest(self, cases: Sequence[str]) -> str:
        """The case among `cases` with the lowest median seconds over the rounds."""
        return min(cases, key=lambda c: statistics.median(self.seconds(c)))

    def versus(self, ours: str, peer: str, label: str = "") -> Spread:
        """Print and return how many times faster `ours` is than `peer` (per round: peer
        seconds / our seconds; median and spread), saying so in words when ours is slower."""
        s = self.ratio(ours, peer)
        verdict = "ours faster" if s.median > 1 else "OURS SLOWER" if s.median < 1 else "even"
        print(f"  {label or f'{ours} vs {peer}'}: {s.fmt()} over {len(self.times)} rounds "
              f"(peer seconds / our seconds; {verdict})")
        return s


@dataclass(frozen=True)
class Clocked:
    """What a case returns when it times itself (to leave its own setup, e.g. building
    input objects, off the clock): `interleaved` records `seconds`, and `value` as the result."""

    seconds: float
    value: Any


def interleaved(cases: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 1) -> Rounds:
    """Run every case `warmup` times untimed, then `rounds` rounds of one call each (a case
    that returns `Clocked` gives its own seconds). Round r starts at case r mod k (ours,
    theirs / theirs, ours for two cases), so that no case always runs first or last: a
    drift in the machine's load within a round then does not favour one side."""
    if rounds < 1:
        raise ValueError("interleaved timing needs at least one round")
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            cases[name]()
    out = Rounds()
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        times: dict[str, float] = {}
        for name in order:
            t0 = time.perf_counter()
            res = cases[name]()
            times[name] = time.perf_counter() - t0
            if isinstance(res, Clocked):
                times[name], res = res.seconds, res.value
            out.last[name] = res
        out.times.append({n: times[n] for n in names})  # stable column order
        out.orders.append(order)
    return out


def guard_sockets(record: Callable[[dict], None]) -> None:
    """An audit hook that records every connection or DNS lookup leaving loopback (what
    tests/socket_guard.py does for the suite; bench does not import tests): a bench's
    `--check-offline`."""
    import sys

    local = ("127.0.0.1", "::1", "localhost")

    def hook(event: str, args: tuple) -> None:
        if event in ("socket.connect", "socket.sendto") and len(args) > 1:
            address = args[1]
            host = address[0] if isinstance(address, tuple) else str(address)
            if host not in local and not str(host).startswith("/"):
                record({"event": event, "address": str(address)})
        elif event in ("socket.getaddrinfo", "socket.gethostbyname") and args and args[0] not in (*local, None):
            record({"event": event, "address": str(args[0])})

    sys.addaudithook(hook)


def say_offline(attempts: list[dict]) -> None:
    """The end of a `--check-offline` run: a line, or exit 1 naming what tried to leave."""
    import sys

    if attempts:
        print(f"NETWORK: {len(attempts)} attempts blocked: {attempts[:3]}", file=sys.stderr)
        raise SystemExit(1)
    print("offline: no socket left this machine (an audit hook guarded the whole run)")
