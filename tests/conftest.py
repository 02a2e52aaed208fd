"""Shared fixtures. Telemetry is off before any library is imported by a test module, and
no test reaches the network (tests/socket_guard.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from yunque import env as _env

_env.apply()  # telemetry off, no hub downloads: the same switches as every entry point
# Tests only (never for users, whose EC2 instance roles need it): no metadata-service
# probe, which waits for a timeout on a machine that has none.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


def _load_guard():
    """tests/socket_guard.py as the one module per process: this pytest may itself be a
    guarded subprocess (tests/test_socket_guard.py runs one), whose sitecustomize loaded it."""
    name = "_yunque_socket_guard"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("socket_guard.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Attempts:
    """Network attempts not yet charged to a test: this process's, and those its
    subprocesses append to `path`."""

    def __init__(self, path: str):
        self.path, self._memory, self._offset, self._lock = path, [], 0, threading.Lock()

    def record(self, attempt: dict) -> None:
        self._memory.append(attempt)

    def take(self) -> list[dict]:
        with self._lock:
            taken, self._memory = self._memory, []
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except FileNotFoundError:  # removed under us (a /tmp cleaner): the children's lines with it
                data = b""
            whole = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next take
            self._offset += len(whole)
            taken += [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]
        return taken


socket_guard = _load_guard()
_fd, _path = tempfile.mkstemp(prefix="yunque-socket-guard-", suffix=".jsonl")
os.close(_fd)
ATTEMPTS = _Attempts(_path)
socket_guard.install(ATTEMPTS.record)
os.environ.update(socket_guard.subprocess_env(os.environ, _path))  # children inherit the guard
socket_guard.patch_popen(_path)  # and get it back when a caller gives them another env


def _describe(attempts: list[dict]) -> str:
    return "\n".join(f"  {a['what']} (pid {a['pid']}: {' '.join(map(str, a['argv']))})" for a in attempts)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A phase (setup, call, teardown) in which anything tried to leave the machine fails,
    even when the error was caught, retried or logged away."""
    report = yield
    attempts = ATTEMPTS.take()
    if not attempts:
        return report
    text = f"network access outside loopback during {report.when} (tests/socket_guard.py):\n{_describe(attempts)}"
    if report.failed:
        report.sections.append(("socket guard", text))
    else:
        report.outcome, report.longrepr = "failed", text
        if hasattr(report, "wasxfail"):
            del report.wasxfail
    return report


def pytest_sessionfinish(session, exitstatus):
    """Attempts after the last test (a subprocess still running) fail the session."""
    if attempts := ATTEMPTS.take():
        print(f"\nnetwork access outside loopback after the last test (tests/socket_guard.py):\n"
              f"{_describe(attempts)}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    Path(_path).unlink(missing_ok=True)


@pytest.fixture
def network_attempts():
    """Takes the attempts recorded so far in this test, so that they do not fail it: for
    the guard's own tests, which make them on purpose."""
    return ATTEMPTS.take


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


HOME_BUCKET = "yunque-home"


@pytest.fixture()
def s3(s3_server, monkeypatch):
    """The S3 server with the bucket homes on an object store live in (HOME_BUCKET), as an
    s3fs filesystem; YUNQUE_S3_ENDPOINT points at it."""
    import s3fs

    monkeypatch.setenv("YUNQUE_S3_ENDPOINT", s3_server)
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    if not fs.exists(HOME_BUCKET):
        fs.mkdir(HOME_BUCKET)
    return fs
