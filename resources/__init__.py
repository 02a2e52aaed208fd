"""Dagster resources: thin wrappers around external systems (storage, settings)."""

from resources.corpus import CorpusStorage
from resources.settings import YunqueSettings

__all__ = ["CorpusStorage", "YunqueSettings"]
