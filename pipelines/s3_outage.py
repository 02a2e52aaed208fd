"""Waiting out a short outage of an S3 endpoint (a restart, a failover of the store).

s3fs retries a call five times on timeouts and a few HTTP errors, but not on a refused
connection: botocore's `EndpointConnectionError` passes straight through once botocore's
own retries (about 4 s) are spent. An endpoint that restarted for 20 s failed every shard
being read. On the filesystems we open (`patient`) such errors are retried too, and as
many times as it takes for the waits to cover YUNQUE_OUTAGE_GRACE_S (60 s by default, the
same grace as the Dagster database's). Beyond it the error is raised, and `is_outage` lets
a reader tell it from a bad file: an outage fails the shard (to be run again), it never
becomes a document's rejection."""

from __future__ import annotations

import os
from typing import Any

GRACE_ENV = "YUNQUE_OUTAGE_GRACE_S"
DEFAULT_GRACE_S = 60.0
# One s3fs attempt at an endpoint that refuses connections: botocore's own retries with
# their random backoff (measured 3.7 s; an estimate, so the grace holds roughly)
ATTEMPT_S = 4.0
_installed = False


def grace_s() -> float:
    return float(os.environ.get(GRACE_ENV) or DEFAULT_GRACE_S)


def attempts_for(grace: float) -> int:
    """s3fs attempts whose time (each ATTEMPT_S, then s3fs' wait of min(1.7**i * 0.1, 15) s)
    covers `grace` seconds."""
    n, spent = 0, 0.0
    while spent < grace:
        spent += ATTEMPT_S + min(1.7**n * 0.1, 15)
        n += 1
    return max(n, 1)


def _connection_errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

    return EndpointConnectionError, ConnectionClosedError


def patient(fs: Any) -> Any:
    """`fs`, made to wait out an outage when it is an S3 filesystem (others are returned as
    they are)."""
    global _installed
    try:
        from s3fs import S3FileSystem
        from s3fs.core import add_retryable_error
    except ImportError:
        return fs
    if not isinstance(fs, S3FileSystem):
        return fs
    if not _installed:
        for error in _connection_errors():
            add_retryable_error(error)
        _installed = True
    fs.retries = max(S3FileSystem.retries, attempts_for(grace_s()))
    return fs


def is_outage(error: BaseException) -> bool:
    """Whether `error` says the store could not be reached (not that a file is bad)."""
    if type(error).__module__.split(".")[0] not in ("botocore", "aiohttp"):
        return False
    from aiohttp import ClientConnectionError

    return isinstance(error, (*_connection_errors(), ClientConnectionError))
