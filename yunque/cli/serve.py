"""`yunque serve`: an OpenAI-compatible endpoint and the chat page on a promoted or chosen
model (serving.app: llama-cpp-python's server on the export's GGUF).

`--model` is champion (the registry's alias, followed without a restart), candidate (the
home's latest export), a registry version (3 or v3) or a path; `--compare SPEC` serves
another beside it. Loopback only unless YUNQUE_API_KEY is set. The command is a front
that forwards to an engine, itself with `--engine-socket` in a child process
(serving.front), so that llama.cpp crashing takes the engine down, not the endpoint.
docs/serve.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

API_KEY_ENV = "YUNQUE_API_KEY"
LOOPBACK = {"localhost"}


def _loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Resolver:
    """Model specs to served models, in one home and its MLflow store."""

    def __init__(self, home: Path, quant: str):
        from resources.tracking import MlflowTracking
        from stages.evaluation.promotion import read_champion
        from stages.store.outputs import DataStore

        self.store, self.quant = DataStore(str(home)), quant
        record = read_champion(self.store) or {}
        self.name = record.get("registered_model", "yunque")
        self.alias = record.get("alias", "champion")
        self.mlflow = MlflowTracking(home=str(self.store.home), tracking_uri=os.environ.get("MLFLOW_TRACKING_URI", ""))
        self.cache = self.store.home / "serve" / "registry" / self.name

    def version(self, version: str, alias: str):
        from serving.models import from_path

        where = self.mlflow.download_version(self.name, version, self.cache)
        return from_path(where, self.quant, alias, version=version)

    def champion(self):
        current = self.mlflow.aliased_version(self.name, self.alias)
        if current is None:
            raise LookupError(f"no {self.alias!r} alias on registered model {self.name!r} in "
                              f"{self.mlflow.display_uri()}: run the main command (promoted_model promotes the "
                              "first evaluated export), or pass --model candidate or --model PATH")
        return self.version(current["version"], "champion")

    def resolve(self, spec: str):
        from serving.models import from_path
        from stages.asset_names import EXPORTED_MODEL

        if spec == "champion":
            return self.champion()
        if spec == "candidate":
            return from_path(self.store.dir(EXPORTED_MODEL), self.quant, "candidate")
        digits = spec[1:] if spec[:1] in "vV" else spec
        if digits.isdigit() and not Path(spec).exists():
            return self.version(digits, f"v{digits}")
        p = Path(spec)
        return from_path(p, self.quant, p.stem if p.is_file() else p.name)


def cmd_serve(args: argparse.Namespace) -> int:
    from serving.models import ModelError
    from yunque import env

    try:
        import llama_cpp.server.app  # noqa: F401  (the server and its dependencies)
    except ImportError as e:
        print(f"yunque serve: llama-cpp-python's server is not installed ({e.name}): "
              "`.venv/bin/pip install -c constraints.txt -e '.[serve]'` (compiles llama.cpp, several minutes "
              "the first time)", file=sys.stderr)
        return 2
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a download is one log line, not a bar
    home = env.use_home(args.home) if args.home else env.home()
    key = os.environ.get(API_KEY_ENV) or None
    if not _loopback(args.host) and not key:
        print(f"yunque serve: --host {args.host} is reachable from other machines: set {API_KEY_ENV} (clients then "
              "send it as 'Authorization: Bearer <key>'), or bind to 127.0.0.1", file=sys.stderr)
        return 2
    if not args.engine_socket:
        return _front(args, key)
    try:
        resolver = Resolver(home, args.quant)
        models = [resolver.resolve(s) for s in [args.model, *args.compare]]
    except (ModelError, LookupError) as e:
        print(f"yunque serve: {e}", file=sys.stderr)
        return 2
    aliases = [m.alias for m in models]
    if len(set(aliases)) != len(aliases):
        print(f"yunque serve: two models with the same name {aliases}: rename a file or pass each once",
              file=sys.stderr)
        return 2
    return _engine(args, key, resolver, models)


def _front(args: argparse.Namespace, key: str | None) -> int:
    """The endpoint: start the engine (this command with --engine-socket), forward to it."""
    from serving.front import Engine, EngineFailed, run_front

    def say(line: str) -> None:
        print(f"yunque serve: {line}", file=sys.stderr, flush=True)

    def argv(sock: str) -> list[str]:
        return [sys.executable, "-m", "yunque.cli", *args.argv, "--engine-socket", sock]

    engine = Engine(argv, say, {"Authorization": f"Bearer {key}"} if key else {})
    try:
        engine.start()
    except EngineFailed as e:
        if e.line:
            say(e.line)
        engine.stop()
        return e.code
    except KeyboardInterrupt:
        engine.stop()
        return 130
    run_front(engine, args.host, args.port, args.log_level)
    return 0


def _warm_up(models: list, threads: int) -> None:
    """Load each model and generate a few tokens before listening: llama.cpp built for
    another CPU crashes here, at start, where the front reports it in one line."""
    import llama_cpp

    for m in models:
        llm = llama_cpp.Llama(model_path=str(m.gguf), n_ctx=256, n_threads=threads, n_threads_batch=threads,
                              verbose=False)
        llm.create_completion("Hola", max_tokens=4, temperature=0.0)
        del llm


def _follow_front() -> None:
    """The engine ends with its front, however the front ended (kill -9 included): it runs
    in a session of its own, which no signal to the front's reaches."""
    import signal
    import threading
    import time

    front = os.getppid()

    def watch() -> None:
        while os.getppid() == front:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown
        time.sleep(10)
        os._exit(1)

    threading.Thread(target=watch, name="front-watch", daemon=True).start()


def _engine(args: argparse.Namespace, key: str | None, resolver: Resolver, models: list) -> int:
    """The engine: the whole application on the front's Unix socket."""
    import uvicorn

    _follow_front()

    from serving.app import ChampionWatcher, build, default_threads
    from serving.limits import Limits
    from stages.data.human_preferences import feedback_dir

    def say(line: str) -> None:
        print(f"yunque serve: {line}", file=sys.stderr, flush=True)

    watcher = None
    if args.model == "champion" and args.watch_seconds > 0:
        def watcher(served):
            return ChampionWatcher(served, "champion", resolver.champion, args.watch_seconds, say)
    app = build(models, feedback_dir=feedback_dir(resolver.store), api_key=key, threads=args.threads,
                limits=Limits(max_body_bytes=args.max_body_bytes, max_tokens=args.max_tokens), watcher=watcher)
    _warm_up(models, args.threads or default_threads())
    base = f"http://{args.host}:{args.port}"
    for m in models:
        rated = f"{m.feedback['ratings']} ratings ({m.feedback['version']})" if m.feedback else "no ratings"
        say(f"{m.alias}: {m.gguf} (version {m.version}, weights {m.weights_sha256[:12]}, context {m.n_ctx or '?'}; "
            f"aligned on {rated})")
    say(f"chat page {base}/ ; OpenAI base_url {base}/v1" + (" (API key required)" if key else "")
        + f"; ratings to {feedback_dir(resolver.store)}")
    uvicorn.run(app, uds=args.engine_socket, log_level=args.log_level, timeout_graceful_shutdown=5)
    return 0


def add_parser(sub) -> None:
    from model.core.gguf_types import ALL_GGUF_TYPES

    s = sub.add_parser("serve", help="an OpenAI-compatible endpoint and the chat page on a model (llama.cpp)")
    s.add_argument("--model", default="champion",
                   help="champion (the registry alias, followed), candidate (the home's latest export), a registry "
                        "version (3 or v3), or PATH (an export directory or a .gguf file)")
    s.add_argument("--compare", action="append", default=[], metavar="SPEC",
                   help="another model (same forms as --model) to compare side by side on the page (repeatable)")
    s.add_argument("--host", default="127.0.0.1", help=f"bind address; other than loopback needs {API_KEY_ENV}")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--quant", default="q8_0", choices=ALL_GGUF_TYPES, help="which of the export's GGUF files to serve")
    s.add_argument("--threads", type=int, default=0, help="llama.cpp threads (default: every core but one; docs/serve.md#threads)")
    s.add_argument("--max-tokens", type=int, default=1024,
                   help="the largest max_tokens a request may ask (also capped by the model's context)")
    s.add_argument("--max-body-bytes", type=int, default=1_000_000, help="the largest request body")
    s.add_argument("--watch-seconds", type=float, default=30,
                   help="how often the champion alias is asked (0: never; POST /yunque/reload asks now)")
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    s.add_argument("--engine-socket", default="", help=argparse.SUPPRESS)  # the engine child (serving.front)
    s.set_defaults(fn=cmd_serve)
