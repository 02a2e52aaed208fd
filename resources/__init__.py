"""Dagster resources: thin wrappers around external systems (storage, settings, torchrun,
MLflow)."""

from resources.corpus import CorpusStorage
from resources.launcher import TorchrunLauncher
from resources.settings import YunqueSettings
from resources.tracking import MlflowTracking

__all__ = ["CorpusStorage", "KubernetesTrainingLauncher", "MlflowTracking", "TorchrunLauncher", "YunqueSettings"]


def __getattr__(name: str):
    # the cluster launcher needs dagster-k8s (the [k8s] extra): imported on first use only
    if name == "KubernetesTrainingLauncher":
        from resources.k8s_training import KubernetesTrainingLauncher

        return KubernetesTrainingLauncher
    raise AttributeError(f"module 'resources' has no attribute {name!r}")
