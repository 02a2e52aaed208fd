"""An endpoint that outlives its engine (serving.front), on real processes: the
engine killed mid-stream, killed with a request waiting, and crashing at start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.serve_server import YUNQUE, Server, exports, free_port, request
from tests.support.ui_server import REPO, wait_for

# A stand-in engine on the front's socket: what the front sees of llama-cpp-python's
# server (a model list, and a chat stream of one event every 0.2 s), slow enough to be
# killed in the middle of an answer.
SLOW_ENGINE = """
import asyncio, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

async def models(request):
    return JSONResponse({"default": "slow", "models": []})

async def chat(request):
    async def events():
        for i in range(200):
            yield f"data: {i}\\n\\n".encode()
            await asyncio.sleep(0.2)
    return StreamingResponse(events(), media_type="text/event-stream")

app = Starlette(routes=[Route("/yunque/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])
uvicorn.run(app, uds=sys.argv[1], log_level="warning")
"""

FRONT = """
import sys
from serving.front import Engine, run_front

def say(line):
    print(f"yunque serve: {line}", file=sys.stderr, flush=True)

engine = Engine(lambda sock: [sys.executable, "-c", sys.argv[1], sock], say)
engine.start()
run_front(engine, "127.0.0.1", int(sys.argv[2]), "warning")
"""


def _status(url: str) -> int:
    """The status of a GET, 0 while nothing listens yet."""
    try:
        return request(url, timeout=10)[0]
    except OSError:
        return 0


def _engine_of(front: subprocess.Popen, marker: str) -> psutil.Process:
    def found():
        return next((c for c in psutil.Process(front.pid).children() if marker in " ".join(c.cmdline())), None)
    return wait_for("the engine process", found, 120, 0.2)


def test_a_stream_cut_by_an_engine_crash_ends_with_an_event_and_the_endpoint_stays(tmp_path):
    port = free_port()
    front = subprocess.Popen([sys.executable, "-c", FRONT, SLOW_ENGINE, str(port)], cwd=REPO, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("the front", lambda: _status(f"{base}/yunque/models") == 200, 120, 0.5)
        engine = _engine_of(front, "uvicorn.run(app, uds=")
        events = []
        with httpx.stream("POST", f"{base}/v1/chat/completions", json={"stream": True}, timeout=30) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line)
                if len(events) == 3:
                    engine.kill()
        assert events[:3] == ["data: 0", "data: 1", "data: 2"]
        assert '"type": "engine_unavailable"' in events[-1] and "crashed during this answer" in events[-1]
        assert len(events) < 10  # it ended there, not after 200 events
        # the endpoint stays: a 503 while the engine restarts, then answers again
        status, body = request(f"{base}/yunque/models")
        assert status in (200, 503), body
        wait_for("the restarted engine", lambda: _status(f"{base}/yunque/models") == 200, 120, 0.5)
        assert front.poll() is None and _engine_of(front, "uvicorn.run(app, uds=").pid != engine.pid
    finally:
        os.killpg(front.pid, signal.SIGTERM)
        _, err = front.communicate(timeout=30)
    assert f"yunque serve: the engine (pid {engine.pid}) died (SIGKILL); its requests in flight got 503; " \
           "restarting it (restart 1)" in err
    assert "yunque serve: the engine answers again" in err
    assert not psutil.pid_exists(engine.pid) or psutil.Process(engine.pid).status() == psutil.STATUS_ZOMBIE


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    return exports(tmp_path_factory.mktemp("engine-exports"))


def test_yunque_serve_answers_503_for_a_request_its_engine_died_under_then_serves_again(exported, tmp_path):
    home = tmp_path / "home"
    server = Server(home, "--model", str(exported["answers"]), "--quant", "f32")
    try:
        engine = _engine_of(server.proc, "--engine-socket")
        body = {"model": "answers", "messages": [{"role": "user", "content": "¿Cuánto es 40 más 2?"}],
                "max_tokens": 8, "temperature": 0}
        engine.suspend()  # the request waits on it
        started = time.monotonic()
        import threading

        answer: dict = {}
        waiting = threading.Thread(target=lambda: answer.update(
            r=request(f"{server.url}/v1/chat/completions", body, timeout=60)))
        waiting.start()
        time.sleep(1.0)
        engine.kill()
        waiting.join(60)
        status, reply = answer["r"]
        assert status == 503, reply
        assert reply["error"]["type"] == "engine_unavailable" and "crashed while answering" in reply["error"]["message"]
        assert time.monotonic() - started < 30
        wait_for("the restarted engine", lambda: request(f"{server.url}/v1/chat/completions", body)[0] == 200,
                 180, 1)
        status, reply = request(f"{server.url}/v1/chat/completions", body)
        assert status == 200 and "42" in reply["choices"][0]["message"]["content"]
        assert server.proc.poll() is None
    finally:
        server.stop()
    log = server.log.read_text()
    assert f"the engine (pid {engine.pid}) died (SIGKILL)" in log and "restarting it (restart 1)" in log


CRASHING_LLAMA = """
import os, signal
import llama_cpp

def crash(self, *args, **kwargs):  # llama.cpp built for another CPU: SIGILL at the first generation
    os.kill(os.getpid(), signal.SIGILL)

llama_cpp.Llama.create_completion = crash
"""


def test_a_native_crash_at_start_is_one_line_with_the_reinstall_command(exported, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CRASHING_LLAMA)
    env = {**os.environ, "YUNQUE_HOME": str(tmp_path / "home"),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(YUNQUE), "serve", "--model", str(exported["answers"]), "--quant", "f32", "--port",
                           str(free_port())], cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("yunque serve: llama.cpp crashed (SIGILL) loading the model and generating its first "
                           "tokens: most likely it was compiled for another CPU")
    assert last.endswith("CMAKE_ARGS=-DGGML_NATIVE=OFF .venv/bin/pip install --force-reinstall --no-cache-dir "
                         "-c constraints.txt llama-cpp-python")


def test_only_a_native_crash_blames_the_build():
    from serving.front import crash_line

    assert "compiled for another CPU" in crash_line(-signal.SIGSEGV) and "CMAKE_ARGS" in crash_line(-signal.SIGBUS)
    killed = crash_line(-signal.SIGKILL)
    assert "killed by SIGKILL" in killed and "out of memory?" in killed and "CMAKE_ARGS" not in killed
