"""The Dagster instance's storage on PostgreSQL, as deploy/postgres and deploy/k8s name it
(`storage: custom: {module: resources.pg_storage, class: PostgresStorage}`): Dagster's
own `DagsterPostgresStorage`, with the same configuration, whose connections ride out a
short outage of the server (`resources.db_outage`). Dagster builds the storage from
dagster.yaml in every process that opens the instance, the run worker included before it
loads any of our code, so this is the one place that reaches them all."""

from __future__ import annotations

from dagster._core.storage.config import PostgresStorageConfig
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage

from resources import db_outage


class PostgresStorage(DagsterPostgresStorage):
    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: PostgresStorageConfig
    ) -> DagsterPostgresStorage:
        db_outage.install()
        return DagsterPostgresStorage.from_config_value(inst_data, config_value)
