"""Records: our jsonl and csv readers with a field mapping (`pipelines.data.readers.shard`,
`pipelines/data/readers/records.py`) against datatrove 0.10.1's `JsonlReader` and `CsvReader`
with an adapter that builds the same text, on the same generated ticket files.

    python -m bench.bench_records [--records N] [--rounds R] [--formats jsonl,jsonl.gz,csv]
        [--breakdown]

The test tickets, cycled to N records, as jsonl, jsonl.gz and csv; each side reads a whole
shard, texts are compared by position, and speed is taken in R interleaved rounds;
--breakdown times each step of our read. docs/benchmarks.md#records-jsonl-and-csv.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import json
import logging
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from bench.common import Rounds, Spread, interleaved

TICKETS = Path(__file__).resolve().parent.parent / "tests" / "data" / "domain" / "corpus" / "tickets"
MAPPING: dict[str, Any] = {
    "text_fields": ["asunto"],
    "turns_field": "mensajes",
    "turn_role_keys": ["autor"],
    "turn_text_keys": ["texto"],
}
# shard name (a folder of the temporary corpus) -> file name in it
FILES = {"jsonl": "tickets.jsonl", "jsonl.gz": "tickets.jsonl.gz", "csv": "tickets.csv"}
FIELDS = ["id", "fecha", "categoria", "prioridad", "asunto", "mensajes"]


# --- the corpus --------------------------------------------------------------------------


def seed_tickets(directory: Path = TICKETS) -> list[dict[str, Any]]:
    """The tickets of the domain corpus as records: the jsonl lines, then the csv rows
    with as many fields as the header (`;`-separated; the conversation a JSON array)."""
    records = [json.loads(line) for line in
               (directory / "tickets.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(directory / "tickets.csv", encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter=";"))
    header = rows[0]
    for row in rows[1:]:
        if len(row) != len(header):
            continue  # the malformed row of the export: nothing to re-render
        record: dict[str, Any] = dict(zip(header, row))
        turns = record.get("mensajes", "")
        if turns.lstrip().startswith("["):
            record["mensajes"] = json.loads(turns, strict=False)
        records.append(record)
    return records


def scaled(seeds: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """N records, the seeds taken in turn, each with a new id (first key, as exported)."""
    out = []
    for i in range(n):
        rest = {k: v for k, v in seeds[i % len(seeds)].items() if k != "id"}
        out.append({"id": f"TK-{i:07d}", **rest})
    return out


def write_corpus(root: Path, records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """One shard per format under `root`; returns the uncompressed bytes of records per
    shard."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    for shard in FILES:
        (root / shard).mkdir(parents=True, exist_ok=True)
    (root / "jsonl" / FILES["jsonl"]).write_bytes(lines)
    (root / "jsonl.gz" / FILES["jsonl.gz"]).write_bytes(gzip.compress(lines, compresslevel=6, mtime=0))
    with open(root / "csv" / FILES["csv"], "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(FIELDS)
        for r in records:
            turns = r.get("mensajes")
            cell = json.dumps(turns, ensure_ascii=False, indent=1) if isinstance(turns, list) else turns
            w.writerow(["" if v is None else v for v in
                        (*(r.get(k) for k in FIELDS[:-1]), cell)])
    csv_bytes = (root / "csv" / FILES["csv"]).stat().st_size
    return {"jsonl": len(lines), "jsonl.gz": len(lines), "csv": csv_bytes}


# --- the sides ---------------------------------------------------------------------------


def ticket_adapter(self: Any, data: dict, path: str, id_in_file: int | str) -> dict:
    """Our mapping as a datatrove adapter: subject, then "Role: text" per turn that has a
    text, joined by blank lines. The id is the record's position (1-based), as our
    `source` ends in `#N`."""
    import orjson

    turns = data.get("mensajes") or []
    if isinstance(turns, str):  # a csv cell
        turns = orjson.loads(turns) if turns.lstrip().startswith("[") else [turns]
    parts = [data["asunto"]] if data.get("asunto") else []
    for turn in turns:
        if isinstance(turn, str):
            parts.append(turn)
        elif turn.get("texto"):
            role = turn.get("autor")
            parts.append(f"{role[:1].upper()}{role[1:]}: {turn['texto']}" if role else turn["texto"])
    return {"text": "\n\n".join(parts), "id": f"{int(id_in_file) + 1}", "metadata": {}}


def datatrove_reader(folder: Path) -> Any:
    from datatrove.pipeline.readers import CSVReader, JsonlReader

    cls = CSVReader if folder.name == "csv" else JsonlReader
    return cls(str(folder), adapter=ticket_adapter)


def our_reader(root: Path, shard: str) -> Callable[[], tuple[list, list]]:
    from pipelines.config import ReaderConfig
    from pipelines.data.corpus import open_corpus
    from pipelines.data.readers.shard import read_shard

    fs, base = open_corpus(str(root))
    cfg = ReaderConfig(**MAPPING)
    return lambda: read_shard(fs, base, shard, cfg)


# --- the checks --------------------------------------------------------------------------


def why_differ(ours: str, theirs: str) -> str:
    if ours.split() == theirs.split():
        return "whitespace only"
    if ours.casefold() == theirs.casefold():
        return "letter case only"
    return "other"


def first_difference(a: str, b: str, context: int = 30) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at character {i}: ours {a[max(0, i - context):i + context]!r} / datatrove {b[max(0, i - context):i + context]!r}"


@dataclass
class Agreement:
    """How the two sides' documents of one shard compare, matched by record position."""

    ours: int = 0
    theirs: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    same: int = 0
    differ: Counter[str] = field(default_factory=Counter)
    only_ours: list[str] = field(default_factory=list)
    only_theirs: list[str] = field(default_factory=list)
    example: dict[str, str] = field(default_factory=dict)

    @property
    def both(self) -> int:
        return self.same + sum(self.differ.values())


def agreement(ours: tuple[list, list], theirs: list) -> Agreement:
    docs, rejections = ours
    mine = {d.source.rsplit("#", 1)[1]: d.text for d in docs}
    peer = {d.id: d.text for d in theirs}
    a = Agreement(len(docs), len(theirs), Counter(r.reason for r in rejections))
    a.only_ours = sorted(set(mine) - set(peer), key=int)
    a.only_theirs = sorted(set(peer) - set(mine), key=int)
    for key in sorted(set(mine) & set(peer), key=int):
        if mine[key] == peer[key]:
            a.same += 1
            continue
        reason = why_differ(mine[key], peer[key])
        a.differ[reason] += 1
        a.example.setdefault(reason, f"record {key} " + first_difference(mine[key], peer[key]))
    return a


def print_agreement(shard: str, n: int, a: Agreement) -> None:
    rej = ", ".join(f"{k} {v:,}" for k, v in sorted(a.rejections.items())) or "none"
    print(f"documents: ours {a.ours:,} of {n:,} records (read rejections: {rej}); "
          f"datatrove {a.theirs:,} ({n - a.theirs:,} records without text skipped)")
    for label, keys in (("ours only", a.only_ours), ("datatrove only", a.only_theirs)):
        if keys:
            print(f"  {label}: {len(keys):,} records, e.g. #{', #'.join(keys[:5])}")
    differ = sum(a.differ.values())
    print(f"texts: {a.same:,} of {a.both:,} documents of both sides the same, {differ:,} differ"
          + (": " + ", ".join(f"{k} {v:,}" for k, v in a.differ.items()) if differ else ""))
    for reason, ex in a.example.items():
        print(f"  {reason}: {ex}")


# --- the run -----------------------------------------------------------------------------


@dataclass
class Result:
    shard: str
    records: int
    docs: dict[str, int]
    mb: float
    rounds: Rounds
    agreement: Agreement


def run_shard(root: Path, shard: str, n: int, nbytes: int, rounds: int) -> Result:
    ours = our_reader(root, shard)
    reader = datatrove_reader(root / shard)
    path = root / shard / FILES[shard]
    size = path.stat().st_size
    print(f"\n== {shard}: {n:,} records in {shard}/{FILES[shard]} ({size / 1e6:,.1f} MB on disk, "
          f"{nbytes / 1e6:,.1f} MB of records)")
    r = interleaved({"ours": ours, "datatrove": lambda: list(reader.run())}, rounds)
    a = agreement(r.last["ours"], r.last["datatrove"])
    print_agreement(shard, n, a)
    docs = {"ours": a.ours, "datatrove": a.theirs}
    mb = nbytes / 1e6
    r.report("datatrove", "docs/s", work=docs, compare=[],
             title=f"{shard}, seconds per round (in the order they ran):")
    for case in r.cases:
        print(f"  {case}: {Spread.of([mb / s for s in r.seconds(case)]).fmt(',.1f', 'MB/s')}")
    r.versus("ours", "datatrove")
    return Result(shard, n, docs, mb, r, a)


def print_summary(results: Sequence[Result]) -> list[str]:
    """The table of the docs page, and the lines where datatrove is faster."""
    print("\nformat    | ours docs/s | datatrove docs/s | ours MB/s | datatrove MB/s | "
          "ours / datatrove (median, range, IQR) | texts differ")
    lost = []
    for res in results:
        med = {c: statistics.median(res.rounds.seconds(c)) for c in res.rounds.cases}
        s = res.rounds.ratio("ours", "datatrove")
        differ = sum(res.agreement.differ.values())
        print(f"{res.shard:<9} | {res.docs['ours'] / med['ours']:>11,.0f} | "
              f"{res.docs['datatrove'] / med['datatrove']:>16,.0f} | {res.mb / med['ours']:>9,.1f} | "
              f"{res.mb / med['datatrove']:>14,.1f} | {s.median:.2f}x ({s.lo:.2f}-{s.hi:.2f}, "
              f"IQR {s.q1:.2f}-{s.q3:.2f}) | {differ:,} of {res.agreement.both:,}")
        if s.median < 1:
            lost.append(f"{res.shard}: ours slower than datatrove, {s.fmt()}")
    return lost


def _per_record(label: str, fn: Callable[[], object], n: int, passes: int = 5) -> None:
    """Print the median over `passes` calls of `fn`, in microseconds per record."""
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    print(f"  {label:<58} {statistics.median(times) / n * 1e6:8.1f} us/record")


def breakdown(root: Path, n: int) -> None:
    """Our read of the jsonl shard taken apart into its steps, each timed alone over every
    record (median of 5 passes), beside datatrove's two per-record steps and both whole
    reads: where our time goes. The csv rows: our line iterator (`Lines`: line numbers,
    the size cap per line, undecodable bytes kept for the rejection) under csv.reader,
    against csv.DictReader on the text file as datatrove opens it."""
    import orjson

    from pipelines.config import ReaderConfig
    from pipelines.data.documents import make_doc_id
    from pipelines.data.readers.decoding import (
        CHUNK,
        check_binary_bytes,
        check_binary_text,
        iter_lines,
    )
    from pipelines.data.readers.records import Lines, RecordProblem, record_text

    cfg = ReaderConfig(**MAPPING)
    data = (root / "jsonl" / FILES["jsonl"]).read_bytes()
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
    lines = [line for _, _, line, _ in iter_lines(iter(chunks), cfg.max_document_bytes)]
    parsed = [json.loads(line) for line in lines]
    texts = []
    for r in parsed:
        try:
            texts.append(record_text(r, cfg))
        except RecordProblem:
            pass
    mapped = [r for r in parsed if "asunto" in r or "mensajes" in r]
    limit, ratio = cfg.max_document_bytes, cfg.max_control_char_ratio
    print(f"\nwhere the time goes: jsonl, {n:,} records, each step alone over all of them "
          "(median of 5 passes)")
    steps: list[tuple[str, Callable[[], object]]] = [
        ("ours: split into lines (iter_lines)", lambda: list(iter_lines(iter(chunks), limit))),
        ("ours: control bytes per line (check_binary_bytes)",
         lambda: [check_binary_bytes(line, ratio) for line in lines]),
        ("ours: decode + json.loads", lambda: [json.loads(line.decode("utf-8")) for line in lines]),
        ("ours: the mapping (record_text)", lambda: [record_text(r, cfg) for r in mapped]),
        ("ours: control characters of the text (check_binary_text)",
         lambda: [check_binary_text(t, ratio) for t in texts]),
        ("ours: doc_id (make_doc_id, xxh3-128)", lambda: [make_doc_id("jsonl/t.jsonl#1", t) for t in texts]),
        ("datatrove: orjson.loads", lambda: [orjson.loads(line) for line in lines]),
        ("datatrove: the adapter", lambda: [ticket_adapter(None, r, "f", 0) for r in mapped]),
        ("ours: the whole read_shard", our_reader(root, "jsonl")),
        ("datatrove: the whole JsonlReader run", lambda: list(datatrove_reader(root / "jsonl").run())),
    ]
    for label, fn in steps:
        _per_record(label, fn, n)
    path = root / "csv" / FILES["csv"]
    raw = path.read_bytes()
    csv_chunks = [raw[i:i + CHUNK] for i in range(0, len(raw), CHUNK)]

    def dict_reader() -> None:
        with open(path, encoding="utf-8") as f:  # text mode, newline translation: as datatrove opens it
            list(csv.DictReader(f))

    print(f"csv, {n:,} rows parsed into cells, nothing else:")
    _per_record("ours: csv.reader over our line iterator (Lines)",
                lambda: list(csv.reader(Lines(iter(csv_chunks), limit), strict=True)), n)
    _per_record("datatrove: csv.DictReader over the text file", dict_reader, n)


class _Quiet:
    """Our readers' rejection warnings to a NullHandler (still logged: the product pays
    for the record; not printed), datatrove's loguru disabled; both undone on exit."""

    def __enter__(self) -> Self:
        from datatrove.utils.logging import logger as loguru

        self._logger = logging.getLogger("pipelines.data.readers")
        self._handler = logging.NullHandler()
        self._logger.addHandler(self._handler)
        self._loguru = loguru
        loguru.disable("datatrove")
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._loguru.enable("datatrove")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000, help="tickets per file")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds per format")
    ap.add_argument("--formats", default=",".join(FILES), help=f"comma-separated, of {', '.join(FILES)}")
    ap.add_argument("--breakdown", action="store_true",
                    help="then time our jsonl read step by step (and the csv row parsing)")
    args = ap.parse_args(argv)
    shards = [s.strip() for s in args.formats.split(",") if s.strip()]
    if unknown := [s for s in shards if s not in FILES]:
        ap.error(f"unknown format(s) {unknown}; known: {', '.join(FILES)}")
    if importlib.util.find_spec("orjson") is None:
        raise SystemExit("datatrove's JsonlReader needs orjson (datatrove's `io` extra), which is not "
                         "installed: .venv/bin/pip install -c constraints.txt orjson")

    seeds = seed_tickets()
    records = scaled(seeds, args.records)
    print(f"{len(seeds)} seed tickets from {TICKETS.relative_to(TICKETS.parents[4])}, "
          f"cycled to {len(records):,} records a file")
    with tempfile.TemporaryDirectory(prefix="bench_records.") as tmp, _Quiet():
        root = Path(tmp)
        sizes = write_corpus(root, records)
        results = [run_shard(root, s, len(records), sizes[s], args.rounds) for s in shards]
        lost = print_summary(results)
        print("\nwhere datatrove is faster:" if lost else "\nno format where datatrove is faster")
        for line in lost:
            print(f"  {line}")
        if args.breakdown:
            breakdown(root, len(records))


if __name__ == "__main__":
    main()
