"""Shared input loading for the benchmarks: texts from a stage's parquet output."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

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
