"""`yunque serve`'s application: llama-cpp-python's OpenAI-compatible server on the
exports' GGUF files (/v1/chat/completions, /v1/completions, /v1/models; streaming or not),
with, on the same server, the refusals of serving.limits, the chat page (GET /), the
served models' identities (/yunque/models), the ratings (POST and GET /yunque/feedback)
and a reload of the champion (POST /yunque/reload).

llama-cpp-python keeps one model in memory and serves requests one at a time; a request
for another model loads that one in its place. The chat template comes from each GGUF's
metadata, so a conversation is formatted as in training. docs/serve.md#the-endpoint.
"""

# no `from __future__ import annotations`: FastAPI reads the routes' annotations (Request)
# at definition, inside build()

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse

from pipelines.feedback.records import DuplicateFeedback, FeedbackError, FeedbackLog
from serving.limits import Limits, RequestLimits
from serving.models import ServedModel

PAGE = Path(__file__).with_name("page.html")
MIN_CTX = 256  # llama.cpp's smallest context: a smaller n_ctx is raised to it


class Served:
    """The served models by alias (the first is the default), a vocabulary-only llama.cpp
    model of each for counting prompt tokens outside the generation lock, and every
    (alias, version, weights) served since start: a rating must name one of them."""

    def __init__(self, models: list[ServedModel]):
        self.models: dict[str, ServedModel] = {}
        self.vocab: dict[str, Any] = {}
        self.templates: dict[str, Any] = {}
        self.ever: set[tuple[str, str, str]] = set()
        for m in models:
            self.add(m)
        self.default = models[0].alias
        self.pending: ServedModel | None = None  # the champion's new version, swapped in by `apply`
        self.lock = threading.Lock()

    def add(self, m: ServedModel) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        vocab = llama_cpp.Llama(model_path=str(m.gguf), vocab_only=True, verbose=False)
        # the template compiled once per model, not per request
        eos = vocab.detokenize([vocab.token_eos()], special=True).decode()
        self.templates[m.alias] = Jinja2ChatFormatter(template=vocab.metadata["tokenizer.chat_template"],
                                                      eos_token=eos, bos_token="")
        self.vocab[m.alias] = vocab
        self.models[m.alias] = m
        self.ever.add((m.alias, m.version, m.weights_sha256))

    def context(self, m: ServedModel) -> int:
        return m.n_ctx or 2048

    def count_prompt(self, alias: str, req: dict) -> tuple[int, int] | None:
        m = self.models.get(alias)
        if m is None:
            return None
        vocab = self.vocab[alias]
        if "messages" in req:
            text = self.templates[alias](messages=req["messages"]).prompt
            ids = vocab.tokenize(text.encode(), add_bos=False, special=True)
        else:
            prompt = req.get("prompt", "")
            prompt = "".join(prompt) if isinstance(prompt, list) else prompt
            ids = vocab.tokenize(prompt.encode(), add_bos=False, special=False)
        return len(ids), self.context(m)

    def apply(self) -> None:
        """Swap in a pending new champion (in the event loop, between requests: the request
        that holds llama.cpp finishes on the old weights; the next one loads the new)."""
        with self.lock:
            m, self.pending = self.pending, None
        if m is None:
            return
        from llama_cpp.server import app as server

        proxy = server._llama_proxy
        proxy[m.alias] = _settings(m, proxy[m.alias]["n_threads"], self.context(m))
        if proxy._current_model_alias == m.alias:
            proxy._current_model_alias = None  # the next request for it loads the new file
        self.add(m)

    def identity(self, alias: str) -> dict[str, str]:
        """Who answers a request for `alias` now (after `apply`): what its rating names."""
        m = self.models[alias]
        return {"model": m.alias, "version": m.version, "weights": m.weights_sha256}

    def identity_known(self, answer: dict) -> bool:
        return (answer.get("model"), answer.get("version"), answer.get("weights_sha256")) in self.ever


def default_threads() -> int:
    """Every core but one: llama.cpp's threads spin-wait, so taking every core makes one
    busy neighbour (a training run, the Dagster daemon) stall each token; measured in
    docs/serve.md#threads."""
    import os

    return max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2) - 1)


def _settings(m: ServedModel, threads: int, n_ctx: int):
    from llama_cpp.server.settings import ModelSettings

    # every field that pydantic-settings would otherwise read from the environment (MODEL,
    # N_CTX ...) is given here
    return ModelSettings(model=str(m.gguf), model_alias=m.alias, n_ctx=max(n_ctx, MIN_CTX), n_threads=threads,
                         n_threads_batch=threads, n_gpu_layers=0, chat_format=None, verbose=False, cache=False)


class ChampionWatcher:
    """Asks `resolve()` every `every_s` seconds which model the champion alias names now,
    and queues it for `Served.apply` when its weights changed (a promotion, or an alias
    moved back by hand)."""

    def __init__(self, served: Served, alias: str, resolve: Callable[[], ServedModel | None], every_s: float,
                 log: Callable[[str], None]):
        self.served, self.alias, self.resolve, self.every_s, self.log = served, alias, resolve, every_s, log
        self.stop = threading.Event()

    def check(self) -> str:
        try:
            m = self.resolve()
        except Exception as e:  # noqa: BLE001 (a registry outage or a bad new version: keep serving what is loaded, say so)
            self.log(f"champion: could not ask the registry ({type(e).__name__}: {e}); still serving "
                     f"version {self.served.models[self.alias].version}")
            return "unreachable"
        with self.served.lock:  # a version already queued counts as served
            now = self.served.pending or self.served.models[self.alias]
        if m is None or m.weights_sha256 == now.weights_sha256:
            return f"unchanged (version {now.version})"
        with self.served.lock:
            self.served.pending = m
        self.log(f"champion: version {m.version} ({m.weights_sha256[:12]}) replaces version {now.version}")
        return f"version {m.version} queued (was {now.version})"

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.check()

    def start(self) -> None:
        threading.Thread(target=self.run, name="champion-watcher", daemon=True).start()


def build(models: list[ServedModel], *, feedback_dir: Path, limits: Limits | None = None, api_key: str | None = None,
          threads: int = 0, watcher: Callable[[Served], ChampionWatcher] | None = None):
    """The ASGI application; `watcher` builds the champion's watcher over the Served set."""

    from llama_cpp.server.app import authenticate, create_app
    from llama_cpp.server.settings import ServerSettings

    threads = threads or default_threads()
    limits = limits or Limits()
    served = Served(models)
    server = ServerSettings(api_key=api_key, interrupt_requests=False, disable_ping_events=False, root_path="")
    app = create_app(server_settings=server,
                     model_settings=[_settings(m, threads, served.context(m)) for m in models])
    app.title, app.version = "Yunque: llama.cpp's OpenAI-compatible server", "1"
    log = FeedbackLog(feedback_dir)
    watch = watcher(served) if watcher else None
    guarded = [Depends(authenticate)]

    # llama-cpp-python's /v1/models names the aliases only: the same list, with who each is,
    # matched before its own (which FastAPI keeps inside the included router)
    @app.get("/v1/models", dependencies=guarded, tags=["OpenAI V1"])
    async def openai_models() -> dict:
        served.apply()
        return {"object": "list", "data": [{"id": m.alias, "object": "model", "owned_by": "yunque", "permissions": [],
                                            "yunque": m.describe()} for m in served.models.values()]}

    app.router.routes.insert(0, app.router.routes.pop())

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/yunque/models", dependencies=guarded)
    async def served_models() -> dict:
        served.apply()
        # the page asks no more than this (a request above it is refused by RequestLimits)
        return {"default": served.default, "models": [
            m.describe() | {"max_tokens": min(limits.max_tokens, served.context(m))} for m in served.models.values()]}

    @app.post("/yunque/feedback", dependencies=guarded, status_code=201)
    async def feedback(request: Request) -> JSONResponse:
        try:
            raw = await request.json()
        except ValueError as e:
            return JSONResponse({"error": f"the body is not valid JSON: {e}"}, status_code=400)
        answers = raw.get("answers") if isinstance(raw, dict) else None
        for i, a in enumerate(answers if isinstance(answers, list) else []):
            if isinstance(a, dict) and not served.identity_known(a):
                weights = str(a.get("weights_sha256"))[:12]
                return JSONResponse({"error": f"answers[{i}]: model {a.get('model')!r} version {a.get('version')!r} "
                                              f"weights {weights} was never served here"}, status_code=400)
        try:
            rec = log.append(raw)  # fsynced before the reply: a "saved" survives a kill -9
        except DuplicateFeedback as e:  # a resubmission: where the first one is
            return JSONResponse({"error": str(e), "position": e.position}, status_code=409)
        except FeedbackError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        # position: the page says "in the served model" once a model holds that many ratings
        return JSONResponse({"saved": True, "id": rec["id"], "time": rec["time"], "position": rec["position"],
                             "ratings": log.count()}, status_code=201)

    @app.get("/yunque/feedback", dependencies=guarded)
    async def feedback_count() -> dict:
        return {"ratings": log.count(), "file": str(log.path)}

    @app.post("/yunque/reload", dependencies=guarded)
    async def reload() -> dict:
        if watch is None:
            raise HTTPException(400, "this server does not follow the champion alias (--model is a version or a path)")
        from starlette.concurrency import run_in_threadpool

        said = await run_in_threadpool(watch.check)
        served.apply()
        return {"champion": said, "models": [m.describe() for m in served.models.values()]}

    if watch:
        watch.start()
    app.state.served, app.state.started = served, time.time()
    return RequestLimits(app, limits, served.count_prompt, lambda: served.default, lambda: sorted(served.models),
                         before=served.apply, identity=served.identity)
