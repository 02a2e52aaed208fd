"""Dagster resources: thin wrappers around external systems (storage, settings, torchrun,
MLflow), and the telemetry switches for all of them (`resources.telemetry`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resources.corpus import CorpusStorage
    from resources.k8s_training import KubernetesTrainingLauncher
    from resources.launcher import TorchrunLauncher
    from resources.settings import YunqueSettings
    from resources.tracking import MlflowTracking

__all__ = ["CorpusStorage", "KubernetesTrainingLauncher", "MlflowTracking", "TorchrunLauncher", "YunqueSettings"]

# Imported on first use, so that `resources.telemetry` (which the CLI reads before anything
# else) costs no Dagster import, and the cluster launcher needs dagster-k8s (the [k8s]
# extra) only when it is used.
_HOME = {"CorpusStorage": "corpus", "KubernetesTrainingLauncher": "k8s_training", "MlflowTracking": "tracking",
         "TorchrunLauncher": "launcher", "YunqueSettings": "settings"}


def __getattr__(name: str) -> object:
    if name in _HOME:
        return getattr(importlib.import_module(f"resources.{_HOME[name]}"), name)
    raise AttributeError(f"module 'resources' has no attribute {name!r}")
