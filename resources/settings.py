"""Run settings: the Yunque home (where outputs land) and the preset + overrides that
build the one configuration tree (`pipelines.config`)."""

from __future__ import annotations

import json

import dagster as dg

from pipelines.config import DataConfig, preset
from pipelines.store import DataStore


class YunqueSettings(dg.ConfigurableResource):
    home: str
    preset: str = "tiny"
    # JSON object of dotted overrides, e.g. {"langid.threshold": 0.5}
    overrides: str = "{}"

    def data_config(self) -> DataConfig:
        try:
            overrides = json.loads(self.overrides or "{}")
        except json.JSONDecodeError as e:
            raise dg.Failure(f"YunqueSettings.overrides is not valid JSON: {e}") from e
        return preset(self.preset, overrides)

    def store(self) -> DataStore:
        return DataStore(self.home)
