"""What a home remembers: the corpus it was built from, the preset and the overrides
(`$YUNQUE_HOME/yunque.json`). `yunque run` writes it; the code location reads it when it
loads, so the CLI, the UI's runs, the sensors and the schedules all work with one
configuration instead of each process guessing from its own environment."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stages.preset_names import DEFAULT_PRESET
from stages.store.location import local_root
from stages.store.outputs import write_json
from stages.store.remote import RemoteHome, is_url

SETTINGS_FILE = "yunque.json"


# The daemon's cadence when neither the process' environment nor the home sets it
SENSOR_INTERVAL_S = 60
TRAINING_CRON = "0 * * * *"


@dataclass
class HomeSettings:
    corpus: str = ""  # "" until a run names one: the sample corpus under the home
    preset: str = DEFAULT_PRESET
    overrides: dict[str, Any] = field(default_factory=dict)
    s3_endpoint: str = ""
    # the daemon's timing (`yunque ui --sensor-interval/--training-cron`); 0 / "": the defaults
    sensor_interval_s: int = 0
    training_cron: str = ""


@dataclass(frozen=True)
class Timing:
    """When the shard sensor lists the corpus and when the training schedule ticks. Dagster
    reads both from code when a code location loads, so every process that loads it (the
    UI's webserver, a daemon's code servers) must find the same values: in the home."""

    sensor_interval_s: int
    training_cron: str

    def describe(self) -> str:
        return f"shard sensor every {self.sensor_interval_s} s, training schedule cron {self.training_cron!r}"


def timing(home: str | Path) -> Timing:
    """YUNQUE_SENSOR_INTERVAL / YUNQUE_TRAINING_CRON of this process, else the home's
    settings, else the defaults."""
    saved = read(home)
    interval = os.environ.get("YUNQUE_SENSOR_INTERVAL") or saved.sensor_interval_s or SENSOR_INTERVAL_S
    return Timing(int(interval), os.environ.get("YUNQUE_TRAINING_CRON") or saved.training_cron or TRAINING_CRON)


def _remote(home: str | Path) -> RemoteHome | None:
    return RemoteHome(str(home), local_root(str(home))) if is_url(home) else None


def exists(home: str | Path) -> bool:
    remote = _remote(home)
    return remote.read_text(SETTINGS_FILE) is not None if remote else (Path(home) / SETTINGS_FILE).exists()


def read(home: str | Path) -> HomeSettings:
    """The settings of a home (a directory, or a URL: then they live in the store, shared
    by every machine)."""
    remote = _remote(home)
    path = f"{home}/{SETTINGS_FILE}" if remote else Path(home) / SETTINGS_FILE
    text = remote.read_text(SETTINGS_FILE) if remote else (path.read_text() if path.exists() else None)
    if text is None:
        return HomeSettings()
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); fix or delete it") from None
    unknown = sorted(set(raw) - set(HomeSettings.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}")
    return HomeSettings(**raw)


def write(home: str | Path, settings: HomeSettings) -> None:
    if remote := _remote(home):
        remote.write_text(SETTINGS_FILE, json.dumps(asdict(settings), indent=1, ensure_ascii=False))
        return
    Path(home).mkdir(parents=True, exist_ok=True)
    write_json(Path(home) / SETTINGS_FILE, asdict(settings))
