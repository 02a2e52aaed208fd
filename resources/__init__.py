"""Dagster resources: thin wrappers around external systems (storage, settings, torchrun,
MLflow)."""

from resources.corpus import CorpusStorage
from resources.launcher import TorchrunLauncher
from resources.settings import YunqueSettings
from resources.tracking import MlflowTracking

__all__ = ["CorpusStorage", "MlflowTracking", "TorchrunLauncher", "YunqueSettings"]
