"""The process environment: telemetry off everywhere (Dagster, MLflow, generic
DO_NOT_TRACK), no hub downloads; and where the Yunque home is. Every entry point (the
CLI, the code location, training subprocesses) applies it.

`AWS_EC2_METADATA_DISABLED` is not set here: it would break S3 credentials from EC2
instance roles. The tests and CI set it (a metadata probe on a machine without one waits
for a timeout)."""

from __future__ import annotations

import os
from pathlib import Path

TELEMETRY_OFF = {
    "DAGSTER_DISABLE_TELEMETRY": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


def apply() -> None:
    for k, v in TELEMETRY_OFF.items():
        os.environ.setdefault(k, v)


def home_url() -> str:
    """$YUNQUE_HOME as given: an object store URL (s3://bucket/prefix, any fsspec URL) or
    a local directory, made absolute."""
    raw = os.environ.get("YUNQUE_HOME", ".yunque")
    if "://" in raw and not raw.startswith("file://"):
        return raw.rstrip("/")
    return str(Path(raw.removeprefix("file://")).absolute())


def home() -> Path:
    """The local root of the home: the home itself, or the local cache of a remote one
    (`stages.store.remote.local_root`)."""
    url = home_url()
    if "://" in url:
        from stages.store.remote import local_root

        return local_root(url)
    return Path(url)
