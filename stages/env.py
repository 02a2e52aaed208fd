"""The process environment: telemetry off everywhere (Dagster, MLflow, generic
DO_NOT_TRACK), no EC2 metadata probing by boto, no hub downloads; and where the Yunque
home is. Every entry point (the CLI, the code location, training subprocesses) applies it."""

from __future__ import annotations

import os
from pathlib import Path

TELEMETRY_OFF = {
    "DAGSTER_DISABLE_TELEMETRY": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "AWS_EC2_METADATA_DISABLED": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


def apply() -> None:
    for k, v in TELEMETRY_OFF.items():
        os.environ.setdefault(k, v)


def home() -> Path:
    return Path(os.environ.get("YUNQUE_HOME", ".yunque")).absolute()
