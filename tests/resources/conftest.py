"""Fixtures of the resources tests: one real `mlflow server` for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.mlflow_server import ARTIFACTS, create_bucket, mlflow_server, s3_env


@pytest.fixture(scope="session")
def mlflow_server_url(s3_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real `mlflow server` for the session (a start costs seconds): sqlite store,
    artifacts on the S3 server under ARTIFACTS. Tests share it: use your own experiment and
    registered model names."""
    create_bucket(s3_server)
    with mlflow_server(tmp_path_factory.mktemp("mlflow_server"), ARTIFACTS, s3_env(s3_server)) as url:
        yield url
