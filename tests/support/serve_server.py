"""`yunque serve` for tests: the real command in a subprocess on a free loopback port, on
exports of tiny checkpoints (tests.support.factory), and the requests the tests make to it.

    exports(root)   two exports with f32 and q8_0 GGUF files: "answers" (trained to reply
                    <answer>42</answer> to any chat prompt) and "random" (another model)
    Server(...)     started, waited for (GET /yunque/models), stopped by killing its group
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from resources.telemetry import TELEMETRY_OFF

YUNQUE = Path(sys.executable).parent / "yunque"
START_TIMEOUT_S = 120.0  # imports and two model loads; the machine is shared


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exports(root: Path) -> dict[str, Path]:
    """{"answers": export dir, "random": export dir}, and their checkpoints beside them."""
    from model.checkpoint.load import load
    from model.export.hf import export_hf
    from tests.support.factory import answering_checkpoint, tiny_checkpoint

    for name, make in (("answers", lambda r: answering_checkpoint(r, 42)), ("random", lambda r: tiny_checkpoint(r, 3))):
        ckpt = make(root / f"{name}-ckpt")
        export_hf(load(ckpt), root / name, gguf=("f32", "q8_0"))
        (root / name / "checkpoint.txt").write_text(str(ckpt))
    return {n: root / n for n in ("answers", "random")}


def request(url: str, body: bytes | dict | None = None, method: str | None = None, key: str | None = None,
            timeout: float = 60) -> tuple[int, dict | str]:
    """(status, parsed JSON or text); never raises on an HTTP error status."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class Server:
    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None):
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / f"serve-{self.port}.log"
        home.mkdir(parents=True, exist_ok=True)
        environ = {**os.environ, **TELEMETRY_OFF, "YUNQUE_HOME": str(home), "NO_PROXY": "127.0.0.1,localhost",
                   **(env or {})}
        environ.pop("MLFLOW_TRACKING_URI", None)
        with open(self.log, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([str(YUNQUE), "serve", "--port", str(self.port), "--threads", "2", *args],
                                         env=environ, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.key = (env or {}).get("YUNQUE_API_KEY")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"yunque serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                status, _ = request(f"{self.url}/yunque/models", key=self.key, timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"yunque serve did not answer in {START_TIMEOUT_S} s:\n{self.log.read_text()}")

    def get(self, path: str) -> tuple[int, dict | str]:
        return request(self.url + path, key=self.key)

    def post(self, path: str, body: bytes | dict) -> tuple[int, dict | str]:
        return request(self.url + path, body, key=self.key)

    def kill(self) -> None:
        """kill -9, as a crash or an OOM killer would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
