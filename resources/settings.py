"""Run settings: the Yunque home (where outputs land) and the preset + typed overrides
that build the one configuration tree (`stages.config`, built once per process by
`stages.settings.tree`)."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg
from pydantic import Field

from resources.overrides import ConfigOverrides, PresetName, as_dict
from stages.config import ConfigError, YunqueConfig, nest
from stages.preset_names import DEFAULT_PRESET
from stages.settings import tree
from stages.store.outputs import DataStore


class YunqueSettings(dg.ConfigurableResource):
    # "" means $YUNQUE_HOME (or ./.yunque), so that a launchpad config need not repeat it
    home: str = Field(default="", description="where outputs land (default: $YUNQUE_HOME)")
    preset: PresetName = Field(default=PresetName(DEFAULT_PRESET), description="the configuration preset")
    # Every field of the tree, optional: what is left empty keeps the preset's value.
    overrides: ConfigOverrides = Field(default_factory=ConfigOverrides)

    @classmethod
    def build(cls, home: str, preset_name: str, overrides: dict[str, Any] | str | None) -> YunqueSettings:
        """From a preset name and JSON-shaped overrides (dotted or nested keys, or a JSON
        string of them), the tree built first so that a bad value fails here, naming the key."""
        raw = json.loads(overrides) if isinstance(overrides, str) else dict(overrides or {})
        tree(home, preset_name, raw)
        return cls(home=home, preset=PresetName(preset_name), overrides=ConfigOverrides.model_validate(nest(raw)))

    def data_config(self) -> YunqueConfig:
        """The run's tree: built on the first call in a process, the same object after."""
        try:
            return tree(self.home, self.preset.value, as_dict(self.overrides))
        except ConfigError as e:
            raise dg.Failure(f"settings: {e}") from e

    def store(self) -> DataStore:
        return DataStore(self.home or None)
