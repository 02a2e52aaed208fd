"""Machines sharing one home on the test S3 server (the root conftest's `s3` fixture and
its HOME_BUCKET): each machine a DataStore with its own local cache."""

from __future__ import annotations

from pathlib import Path

from stages.store.outputs import DataStore
from tests.conftest import HOME_BUCKET as BUCKET


def machine(monkeypatch, tmp_path: Path, name: str, prefix: str) -> DataStore:
    """A DataStore as one machine sees the home: its own local cache."""
    monkeypatch.setenv("YUNQUE_CACHE", str(tmp_path / name))
    return DataStore(f"s3://{BUCKET}/{prefix}")
