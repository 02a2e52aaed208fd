"""`yunque ui` for tests: the real command (webserver and daemon) on a home, its GraphQL
API (what the UI's buttons call), and the environment the tests give it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import REPO

YUNQUE = str(Path(sys.executable).with_name("yunque"))
FAST = {"YUNQUE_SENSOR_INTERVAL": "5", "YUNQUE_AUTOMATION_INTERVAL": "5", "YUNQUE_DAEMON_INTERVAL": "3"}


def ui_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("YUNQUE_", "DAGSTER_HOME"))}
    return {**env, **FAST, "YUNQUE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ui(home: Path, **extra: str):
    """`yunque ui` on `home`: yields the GraphQL URL once the webserver answers."""
    port = free_port()
    proc = subprocess.Popen([YUNQUE, "--home", str(home), "ui", "--port", str(port)], cwd=REPO,
                            env=ui_env(home, **extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.time() < deadline, "the webserver did not answer within 180 s"
                time.sleep(1)
        yield f"http://127.0.0.1:{port}/graphql"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    assert "errors" not in out, out["errors"]
    return out["data"]


def wait_for(what: str, predicate, timeout: float, poll: float = 2.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := predicate():
            return value
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


LAUNCH = """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
  ... on InvalidSubsetError { message } ... on UnauthorizedError { message } } }"""
