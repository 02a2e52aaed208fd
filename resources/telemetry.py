"""Telemetry off for every system we run (Dagster, MLflow, the Hugging Face hub, anything
that honours DO_NOT_TRACK), and no hub downloads. Every entry point applies it: the CLI,
the code location, our daemon and every training launch.

`AWS_EC2_METADATA_DISABLED` is not set here: it would break S3 credentials from EC2
instance roles. The tests and CI set it (a metadata probe on a machine without one waits
for a timeout)."""

from __future__ import annotations

import os

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
