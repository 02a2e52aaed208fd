"""The configuration tree of a home's run, built once per process.

A run's settings are a preset and overrides; the tree they describe is built and
validated by `stages.config.preset`, with the home's calibration proposals at hand, and
then shared: every stage of a run, and every later call with the same settings in the
same process (the CLI's check, the settings resource, each asset of a run), gets the
same tree instead of validating it again. The tree is read, never changed, by what
receives it. docs/architecture.md#the-configuration.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from stages.config import YunqueConfig, nest, preset
from stages.data.filter_profile import load_proposal
from stages.store.location import home_url, spelled
from stages.store.outputs import DataStore


def tree(home: str | None, preset_name: str, overrides: Mapping[str, Any] | None = None) -> YunqueConfig:
    """The tree of `preset_name` with `overrides` for the home `home` (None or "": the
    process' home), or a ConfigError naming the key."""
    where = spelled(home) if home else home_url()
    # one key for every spelling of the same overrides (dotted or nested, in any order)
    return _built(where, preset_name, json.dumps(nest(overrides or {}), sort_keys=True))


@lru_cache(maxsize=32)
def _built(home: str, preset_name: str, overrides: str) -> YunqueConfig:
    # the store is opened only when the overrides adopt a calibration
    return preset(preset_name, json.loads(overrides), proposals=lambda pid: load_proposal(DataStore(home), pid).thresholds())
