"""An endpoint that outlives its engine.

llama.cpp is native code, and a build for another CPU dies with SIGILL or SIGSEGV at the
first generation, taking its process with it. So `yunque serve` runs the application in
a child process (the engine, on a Unix socket) and this front in its own: `Engine` starts
the child, which generates a few tokens before it listens, so that a native crash shows
at start (one line, `crash_line`) and a later crash restarts it; `front_app` forwards
every request, and one in flight when the engine dies gets a 503 (or, mid-stream, a last
event naming the crash). docs/serve.md#an-endpoint-that-outlives-its-engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

READY_TIMEOUT_S = 300.0  # imports, a registry download, each model loaded and tried
# hop-by-hop headers (RFC 9110 7.6.1) stay on their own hop
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
       "transfer-encoding", "upgrade", "host"}
REINSTALL = ("CMAKE_ARGS=-DGGML_NATIVE=OFF .venv/bin/pip install --force-reinstall --no-cache-dir "
             "-c constraints.txt llama-cpp-python")


class EngineFailed(RuntimeError):
    """The engine never answered: the line to print ("" when the engine printed its own)
    and the exit status for the command."""

    def __init__(self, line: str, code: int):
        super().__init__(line or f"the engine exited with code {code}")
        self.line, self.code = line, code


NATIVE_CRASH = {signal.SIGILL, signal.SIGSEGV, signal.SIGBUS}  # what a build for another CPU dies of


def crash_line(code: int) -> str:
    """Why the first engine did not start, in one line, when a signal killed it."""
    sig = signal.Signals(-code)
    if sig in NATIVE_CRASH:
        return (f"llama.cpp crashed ({sig.name}) loading the model and generating its first tokens: most likely it "
                f"was compiled for another CPU (pip's native build); reinstall it portable: {REINSTALL}")
    return (f"the engine was killed by {sig.name} while it loaded the model and generated its first tokens"
            + (" (out of memory? see the kernel log: dmesg)" if sig == signal.SIGKILL else ""))


class Engine:
    """The engine child: `argv(socket)` is its command line, serving on that Unix socket."""

    def __init__(self, argv: Callable[[str], list[str]], say: Callable[[str], None],
                 headers: dict[str, str] | None = None):
        self.argv, self.say, self.headers = argv, say, headers or {}
        self.dir = Path(tempfile.mkdtemp(prefix="yunque-engine-"))
        self.socket = ""
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.ready = threading.Event()
        self.stopping = False

    def start(self) -> None:
        """Start a child and wait until it answers; EngineFailed if it exits first. Its
        output is the command's (the model lines, its own one-line errors)."""
        self.ready.clear()
        sock = str(self.dir / f"engine-{self.restarts}.sock")
        self.proc = subprocess.Popen(self.argv(sock), start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if (code := self.proc.poll()) is not None:
                raise EngineFailed(crash_line(code) if code < 0 else "", 2 if code < 0 else code)
            if os.path.exists(sock) and _answers(sock, self.headers):
                break
            if time.monotonic() > deadline:
                self._kill()
                raise EngineFailed(f"the engine did not answer within {READY_TIMEOUT_S:.0f} s", 1)
            time.sleep(0.2)
        self.socket = sock
        self.ready.set()

    def watch(self) -> None:
        """In a thread: restart the engine whenever it dies, until `stop`."""
        while not self.stopping:
            proc = self.proc
            if proc is not None and proc.poll() is not None and not self.stopping:
                code = proc.returncode
                what = signal.Signals(-code).name if code < 0 else f"exit code {code}"
                self.ready.clear()
                self.restarts += 1
                self.say(f"the engine (pid {proc.pid}) died ({what}); its requests in flight got 503; restarting it "
                         f"(restart {self.restarts})")
                try:
                    self.start()
                    self.say(f"the engine answers again (pid {self.proc.pid})")
                except EngineFailed as e:
                    self.say(f"the engine did not come back ({e}); trying again in 5 s")
                    time.sleep(5)
            time.sleep(0.2)

    def stop(self) -> None:
        """For good: the watch ends, the engine is stopped, its socket folder removed."""
        self.stopping = True
        self._kill()
        with contextlib.suppress(OSError):
            for p in self.dir.iterdir():
                p.unlink()
            self.dir.rmdir()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _answers(sock: str, headers: dict[str, str]) -> bool:
    import httpx

    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=5) as c:
            return c.get("http://engine/yunque/models", headers=headers).status_code == 200
    except httpx.HTTPError:
        return False


def _unavailable(why: str) -> bytes:
    return json.dumps({"error": {"message": why, "type": "engine_unavailable", "code": 503}}).encode()


def front_app(engine: Engine):
    """The ASGI application users reach: every request forwarded to the engine."""
    import httpx
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse

    clients: dict[str, httpx.AsyncClient] = {}

    async def client() -> httpx.AsyncClient:
        sock = engine.socket
        if sock not in clients:  # one pooled client per engine (a restarted one has a new socket)
            for old in list(clients):
                await clients.pop(old).aclose()
            clients[sock] = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=sock), base_url="http://engine",
                                              timeout=httpx.Timeout(None, connect=5))
        return clients[sock]

    def refuse(why: str) -> Response:
        return Response(_unavailable(why), status_code=503, media_type="application/json",
                        headers={"Retry-After": "5"})

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                await send({"type": f"{kind}.complete"})  # lifespan.startup / lifespan.shutdown
                if kind == "lifespan.shutdown":
                    return
        request = Request(scope, receive)
        if not engine.ready.is_set():
            await refuse("the model engine is restarting after a crash; retry in a few seconds")(scope, receive, send)
            return
        headers = [(k, v) for k, v in request.headers.raw if k.decode().lower() not in HOP]
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        http = await client()
        upstream = http.build_request(request.method, path, headers=headers, content=request.stream())
        try:
            answer = await http.send(upstream, stream=True)
        except httpx.HTTPError:
            await refuse("the model engine crashed while answering; it is restarting, retry in a few seconds")(
                scope, receive, send)
            return
        streaming = answer.headers.get("content-type", "").startswith("text/event-stream")

        async def body():
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                if streaming:  # the status went out already: the stream's last event says why it ends
                    yield (b"data: " + _unavailable("the model engine crashed during this answer; it is "
                                                    "restarting") + b"\n\n")
            finally:
                await answer.aclose()

        out = [(k, v) for k, v in answer.headers.raw if k.decode().lower() not in HOP]
        resp = StreamingResponse(body(), status_code=answer.status_code)
        resp.raw_headers = out  # the engine's own, less the hop-by-hop ones
        await resp(scope, receive, send)

    return app


def run_front(engine: Engine, host: str, port: int, log_level: str) -> None:
    """Serve the front until Ctrl-C, the engine watched meanwhile; the engine stops with it."""
    import uvicorn

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    # uvicorn re-raises the SIGTERM it caught once it has shut down: with the default
    # action, the process would die there, before the engine is stopped below
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)
    threading.Thread(target=engine.watch, name="engine-watch", daemon=True).start()
    try:
        uvicorn.run(front_app(engine), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=5)
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
