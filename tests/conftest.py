"""Shared fixtures. Telemetry is off before any library is imported by a test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from yunque import env as _env

_env.apply()  # telemetry off, no hub downloads: the same switches as every entry point
# Tests only (never for users, whose EC2 instance roles need it): no metadata-service
# probe, which waits for a timeout on a machine that has none.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3 protocol server (moto) on 127.0.0.1 and a free port; yields its URL.

    Buckets are created without a region in client_kwargs (moto mishandles it); the region
    comes from AWS_DEFAULT_REGION.
    """
    from moto.server import ThreadedMotoServer

    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_SESSION_TOKEN", raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def s3_storage_options(s3_server: str) -> dict[str, Any]:
    """storage_options for s3fs against the test server (fresh instance per test, so
    no listing cached by an earlier test leaks in)."""
    return {
        "client_kwargs": {"endpoint_url": s3_server},
        "key": "testing",
        "secret": "testing",
        "skip_instance_cache": True,
    }
