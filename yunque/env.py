"""Process environment every Yunque entry point sets before doing anything: telemetry
off everywhere (Dagster, MLflow, generic DO_NOT_TRACK), no EC2 metadata probing by
boto, and no hub downloads."""

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


def use_home(path: str | Path | None = None) -> Path:
    """Point YUNQUE_HOME and DAGSTER_HOME at one place (`$YUNQUE_HOME/dagster`) and give
    a new instance our dagster.yaml (telemetry off, sqlite storage). An existing
    dagster.yaml is left alone: it may point at Postgres."""
    apply()
    h = Path(path).absolute() if path else home()
    os.environ["YUNQUE_HOME"] = str(h)
    dagster_home = h / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    template = Path(__file__).resolve().parents[1] / "dagster.yaml"
    target = dagster_home / "dagster.yaml"
    text = template.read_text() if template.exists() else "telemetry:\n  enabled: false\n"
    if not target.exists():
        target.write_text(text)
    return h


apply()
