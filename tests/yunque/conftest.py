"""Fixtures of the yunque tests: one real PostgreSQL server for the session
(tests/yunque/pg_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.yunque.pg_server import binaries, postgres_server


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real PostgreSQL server and database for the session (see the module docstring)."""
    if binaries() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, postgres): apt-get install postgresql")
    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url
