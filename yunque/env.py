"""The CLI's environment: telemetry off (`stages.env`), and one home for Yunque's outputs
and the Dagster instance."""

import os
from pathlib import Path

from stages.env import TELEMETRY_OFF, apply, home

__all__ = ["TELEMETRY_OFF", "apply", "home", "use_home"]


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
