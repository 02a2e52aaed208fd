"""Serving: `yunque serve`, its engine reached past the front, llama-cpp-python's own server
on the same GGUF file, and our KV-cache generation in process, on the same model, prompts
and number of new tokens: time to first token and new tokens per second, for 1 stream and
for N concurrent streams.

    python -m bench.bench_serve [--home H] [--export DIR --checkpoint CKPT] [--quant q8_0]
                                [--new 128] [--streams 1,8] [--threads 2] [--rounds 5]

Greedy, end tokens banned, in interleaved rounds. docs/benchmarks.md#serving.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from bench.common import Clocked, Spread, interleaved, yunque_home

PROMPTS = ["El administrador configura el servidor de correo", "Para instalar un paquete en Debian",
           "La red del sistema se configura con", "Los archivos de registro se guardan en",
           "Un usuario puede cambiar su contraseña con", "El núcleo Linux carga los módulos",
           "La copia de seguridad diaria incluye", "Para compilar el programa hace falta"]


class Server:
    """A server in its own process group on a free port, ready when `ready` answers 200:
    `yunque serve ARGS`, or with `plain` llama-cpp-python's own `python -m llama_cpp.server
    ARGS` (the same engine without our limits, page and feedback routes)."""

    def __init__(self, home: Path, *args: str, plain: bool = False):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.key = None if plain else os.environ.get("YUNQUE_API_KEY")
        home.mkdir(parents=True, exist_ok=True)
        command = ([sys.executable, "-m", "llama_cpp.server"] if plain
                   else [str(Path(sys.executable).parent / "yunque"), "serve"])
        ready = "/v1/models" if plain else "/yunque/models"
        with open(home / "serve.log", "wb") as log:
            self.proc = subprocess.Popen([*command, "--port", str(self.port), *args],
                                         env={**os.environ, "YUNQUE_HOME": str(home)},
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {(home / 'serve.log').read_text()[-2000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", ready, headers={"Authorization": f"Bearer {self.key}"} if self.key else {})
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("yunque serve did not answer in 2 minutes")

    def engine_socket(self) -> str:
        """`yunque serve`'s engine's own Unix socket: the same application without the
        front's hop (serving.front)."""
        import psutil

        for child in psutil.Process(self.proc.pid).children(recursive=True):
            cmd = child.cmdline()
            if "--engine-socket" in cmd:
                return cmd[cmd.index("--engine-socket") + 1]
        raise RuntimeError("no engine process under yunque serve")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the engine's)."""

    def __init__(self, path: str, timeout: float):
        super().__init__("engine", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def _stream(port: int | str, prompt: str, new: int, banned: list[int], key: str | None) -> tuple[float, float, int]:
    """(seconds to the first chunk, seconds to the end, chunks) of one streamed completion,
    to a port on 127.0.0.1 or a Unix socket's path."""
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": new, "temperature": 0, "stream": True,
                       "logit_bias": {str(t): -100 for t in banned}})
    c = (UnixConnection(port, timeout=600) if isinstance(port, str)
         else http.client.HTTPConnection("127.0.0.1", port, timeout=600))
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json",
                                                **({"Authorization": f"Bearer {key}"} if key else {})})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first, chunks = None, 0
    for line in r:
        if line.startswith(b"data:") and b"[DONE]" not in line:
            chunks += 1
            if first is None:
                first = time.perf_counter() - t0
    c.close()
    return first or 0.0, time.perf_counter() - t0, chunks


def serve_case(server: Server, n: int, new: int, banned: list[int], ttfts: list[float], engine: bool = False):
    """One round: n streams at once (to the engine's socket, past the front, if `engine`);
    every stream's time to first token goes to `ttfts`."""
    where = server.engine_socket() if engine else server.port

    def run() -> Clocked:
        out: list[tuple[float, float, int]] = [None] * n  # type: ignore[list-item]

        def one(i: int) -> None:
            out[i] = _stream(where, PROMPTS[i % len(PROMPTS)], new, banned, server.key)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        ttfts.extend(o[0] for o in out)
        return Clocked(wall, {"chunks": sum(o[2] for o in out)})
    return run


def ours_case(loaded, n: int, new: int, ttfts: list[float]):
    from model.core.generate import Sampling, generate

    rows = [loaded.tokenizer.encode(PROMPTS[i % len(PROMPTS)]) for i in range(n)]
    sampling = Sampling(max_new_tokens=new)  # greedy, no stop tokens: exactly `new` per row

    def run() -> Clocked:
        first: list[float] = []
        t0 = time.perf_counter()

        def seen(_row: int, _token: int) -> None:
            if not first:
                first.append(time.perf_counter() - t0)

        with torch.inference_mode():
            out = generate(loaded.model, rows, sampling, pad_id=loaded.tokenizer.eot_id, on_token=seen)
        wall = time.perf_counter() - t0
        ttfts.extend([first[0]] * n)  # the batch's first token is every row's
        return Clocked(wall, {"chunks": sum(len(o) for o in out)})
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--home", default=None, help="a home after the main command (default $YUNQUE_HOME or ./.yunque)")
    p.add_argument("--export", help="an export directory with the GGUF file (default: the home's exported_model)")
    p.add_argument("--checkpoint", help="the checkpoint it was exported from (default: the export's record)")
    p.add_argument("--quant", default="q8_0", help="the GGUF file served (f32 computes what ours computes)")
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--streams", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    from model.checkpoint.load import load

    home = Path(args.home or yunque_home())
    export = Path(args.export or home / "data" / "exported_model")
    checkpoint = args.checkpoint or json.loads((export / "yunque_export.json").read_text())["checkpoint"]
    torch.set_num_threads(args.threads)
    loaded = load(checkpoint)
    tok = loaded.tokenizer
    new = min(args.new, loaded.config.context - max(len(tok.encode(x)) for x in PROMPTS) - 1)
    banned = [tok.eot_id, tok.end_id]
    print(f"{export} ({args.quant}) served by `yunque serve --threads {args.threads}`, beside model.core.generate "
          f"on {checkpoint} (fp32, {args.threads} threads): {loaded.model.num_params() / 1e6:.1f}M parameters, "
          f"{new} new tokens per stream, greedy, end tokens banned")
    scratch = home / "bench_serve"
    link = scratch / "bench"  # the served model's name in requests
    scratch.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(export.resolve())
    server = Server(scratch / "home", "--model", str(link), "--quant", args.quant, "--threads", str(args.threads),
                    "--max-tokens", str(max(new, 1)))
    gguf = export / f"model-{args.quant}.gguf"
    plain = Server(scratch / "plain", "--model", str(gguf), "--model_alias", "bench", "--n_threads", str(args.threads),
                   "--n_threads_batch", str(args.threads), "--n_ctx", str(max(256, loaded.config.context)),
                   "--interrupt_requests", "False", plain=True)
    try:
        for n in [int(s) for s in args.streams.split(",")]:
            ttfts: dict[str, list[float]] = {"serve": [], "engine": [], "llama_cpp": [], "ours": []}
            r = interleaved({"serve": serve_case(server, n, new, banned, ttfts["serve"]),
                             "engine": serve_case(server, n, new, banned, ttfts["engine"], engine=True),
                             "llama_cpp": serve_case(plain, n, new, banned, ttfts["llama_cpp"]),
                             "ours": ours_case(loaded, n, new, ttfts["ours"])}, args.rounds)
            print(f"\n{n} stream(s) ({args.rounds} interleaved rounds):")
            for case in ("serve", "engine", "llama_cpp", "ours"):
                tokens = r.last[case]["chunks"]
                rate = Spread.of([tokens / s for s in r.seconds(case)])
                ttft = ttfts[case][-args.rounds * n:]  # the timed rounds, not the warm-up
                print(f"  {case:<9} new tokens/s (all streams) {rate.fmt(',.1f', 'tok/s')}; time to first token "
                      f"(every stream of every round) median {statistics.median(ttft) * 1000:,.0f} ms, "
                      f"worst {max(ttft) * 1000:,.0f} ms")
            speed = r.ratio("serve", "ours")  # per round: our seconds / the server's seconds
            print(f"  serve vs ours, {n} stream(s): {speed.fmt()} (> 1: the server is faster; "
                  f"{'the server faster' if speed.median > 1 else 'OURS FASTER' if speed.median < 1 else 'even'})")
            # what our layer (limits, page, feedback routes) costs over the engine's own server
            print(f"  serve vs llama_cpp's own server, {n} stream(s): {r.ratio('serve', 'llama_cpp').fmt()} "
                  "(< 1: yunque serve slower)")
            # what the front (the hop that keeps the endpoint up when the engine dies) costs
            print(f"  serve vs its engine reached directly, {n} stream(s): {r.ratio('serve', 'engine').fmt()} "
                  "(< 1: the front's hop costs that much)")
    finally:
        server.stop()
        plain.stop()


if __name__ == "__main__":
    main()
