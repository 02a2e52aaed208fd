"""A real `mlflow server` for tests: a subprocess of the venv's `mlflow` with a sqlite
backend store in a temp dir and proxied artifacts (`--serve-artifacts`) on an S3 server
(moto, see conftest's `s3_server`). Clients talk HTTP only; the server alone holds the S3
endpoint and credentials, as in the "one server" deployment.

    with mlflow_server(tmp_path, "s3://bucket/prefix", s3_env(s3_server)) as url: ...

and, for the resources tests, one server for the session: the `mlflow_server_url` fixture
(tests/resources/conftest.py).

The server runs in its own process group and is always stopped by killing that group
(uvicorn forks a worker: killing only the parent would leave it serving the port).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from resources.telemetry import TELEMETRY_OFF

MLFLOW = Path(sys.executable).parent / "mlflow"  # the venv's console script, beside its python
BUCKET = "yunque-mlflow"
PREFIX = "artifacts"
ARTIFACTS = f"s3://{BUCKET}/{PREFIX}"  # --artifacts-destination of the fixture's server
START_TIMEOUT_S = 120.0  # a cold start (imports, sqlite migrations) takes ~10 s here; the machine is shared
# the client's view of the server is only MLFLOW_TRACKING_URI: nothing inherited may point it elsewhere
_NOT_INHERITED = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME",
                  "MLFLOW_EXPERIMENT_ID", "AWS_PROFILE", "AWS_SESSION_TOKEN")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the server's process group (uvicorn's supervisor and its worker), then
    SIGKILL to whatever is left of the group (a worker outliving its supervisor)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
    proc.wait()


def server_command(backend_store_uri: str, artifacts_destination: str, port: int,
                   serve_artifacts: bool = True) -> list[str]:
    """The command the docs give, with one worker (a test needs no more, the machine has 2
    cores). serve_artifacts=False: the other topology, where the server only hands out
    `artifacts_destination` as the default artifact root and clients write to it directly."""
    where = (["--serve-artifacts", "--artifacts-destination", artifacts_destination] if serve_artifacts
             else ["--no-serve-artifacts", "--default-artifact-root", artifacts_destination])
    return [str(MLFLOW), "server", "--backend-store-uri", backend_store_uri, *where,
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]


@contextmanager
def mlflow_server(base: Path, artifacts_destination: str, env: dict[str, str], *,
                  backend_store_uri: str | None = None, serve_artifacts: bool = True) -> Iterator[str]:
    """Start `mlflow server` (store: `backend_store_uri`, by default sqlite `base/mlflow.db`;
    artifacts proxied to `artifacts_destination`) with `env` over the current environment
    (MLFLOW_S3_ENDPOINT_URL and AWS_* for an S3 destination); yield its URL once /health
    answers; always stop it. Its output is in `base/server.log`."""
    base.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    inherited = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    log_path = base / "server.log"
    cmd = server_command(backend_store_uri or f"sqlite:///{base / 'mlflow.db'}", artifacts_destination, port,
                         serve_artifacts)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=base, env={**inherited, **TELEMETRY_OFF, **env}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"mlflow server on port {port} did not become healthy "
                                   f"(exit code {proc.poll()}); {log_path}:\n{tail}")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)


def s3_env(endpoint: str) -> dict[str, str]:
    """What a process needs to reach the test S3 server directly (the fixture's test creds)."""
    return {"MLFLOW_S3_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost"}


def create_bucket(endpoint: str, bucket: str = BUCKET) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass

