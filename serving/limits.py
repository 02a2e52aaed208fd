"""What the endpoint refuses or adjusts before llama.cpp sees it.

Refused with an OpenAI-style error: a body too large, not JSON or not sent as JSON, a
model not served, max_tokens over the limit, a last turn longer than the context (found
here because llama.cpp finds it only once a stream has started). Adjusted, and said in
`X-Yunque-*` headers sent before the first token: the oldest turns dropped to leave the
reply room, the seed, who answers. An ASGI middleware, so the body is read once and the
same bytes go on; it also queues the generation requests in order of arrival. The codes
and headers: docs/serve.md#limits-and-errors.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

CHECKED = ("/v1/chat/completions", "/v1/completions")
# the share of the context a fitted conversation leaves for the reply, at most (a request's
# smaller max_tokens leaves less): on a 256-token model, 128 tokens of conversation
FIT_REPLY = 0.5
HEADER = "x-yunque-"


@dataclass(frozen=True)
class Adjusted:
    """What was changed in a request before llama.cpp saw it, for its response's headers."""

    body: bytes
    dropped: int  # messages left out, oldest first
    prompt_tokens: int
    context: int
    seed: int
    who: dict[str, str]  # {"model", "version", "weights"}

    def headers(self) -> list[tuple[bytes, bytes]]:
        said = {"dropped-messages": self.dropped, "prompt-tokens": self.prompt_tokens, "context": self.context,
                "reply-room": self.context - self.prompt_tokens, "seed": self.seed, **self.who}
        return [(f"{HEADER}{k}".encode(), str(v).encode()) for k, v in said.items()]


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1_000_000
    max_tokens: int = 1024  # per request; also capped by the model's context


def error(status: int, message: str, code: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


class RequestLimits:
    """`count_prompt(model, body)` gives (prompt tokens, the model's context) for a known
    model, or None for an unknown one; `default_model()` names the model a request without
    one gets; `before()` runs first on every checked request (the champion watcher's swap)."""

    def __init__(self, app, limits: Limits, count_prompt: Callable[[str, dict], tuple[int, int] | None],
                 default_model: Callable[[], str], served: Callable[[], list[str]],
                 before: Callable[[], None] = lambda: None,
                 identity: Callable[[str], dict[str, str]] = lambda alias: {"model": alias}):
        self.app, self.limits, self.identity = app, limits, identity
        self.count_prompt, self.default_model, self.served, self.before = count_prompt, default_model, served, before
        # llama-cpp-python generates for one request at a time anyway, but its own locks make
        # waiting requests contend: 8 concurrent streams ran at a sixth of one stream's rate
        # (docs/benchmarks.md#serving). Queued here (asyncio's lock is FIFO), they keep it.
        self.gate = asyncio.Lock()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in CHECKED:
            await self.app(scope, receive, send)
            return
        self.before()
        body, too_large = await _read(receive, self.limits.max_body_bytes)
        checked = (error(413, f"request body over {self.limits.max_body_bytes:,} bytes", "body_too_large")
                   if too_large else _not_json(scope) or self.check(scope["path"], body))
        if isinstance(checked, tuple):
            await _reply(send, *checked)
            return
        async with self.gate:  # one generation at a time, first come first served
            await self.app(scope, _replay(checked.body, receive), _with_headers(send, checked.headers()))

    def check(self, path: str, body: bytes) -> tuple[int, dict] | Adjusted:
        """The refusal, or the request as llama.cpp gets it."""
        try:
            req = json.loads(body)
        except ValueError as e:
            return error(400, f"the request body is not valid JSON: {e}", "invalid_json")
        if not isinstance(req, dict):
            return error(400, "the request body must be a JSON object", "invalid_json")
        model = req.get("model") or self.default_model()
        if not isinstance(model, str):
            return error(400, "model: expected a string", "invalid_model", "model")
        wanted = req.get("max_tokens")
        if wanted is not None and (not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1):
            return error(400, f"max_tokens: expected a positive integer, got {wanted!r}", "invalid_max_tokens",
                         "max_tokens")
        if path.endswith("chat/completions"):
            if not isinstance(req.get("messages"), list) or not req["messages"]:
                return error(400, "messages: expected a non-empty list", "invalid_messages", "messages")
        elif not isinstance(req.get("prompt", ""), (str, list)):
            return error(400, "prompt: expected a string", "invalid_prompt", "prompt")
        try:
            counted = self.count_prompt(model, req)
        except (KeyError, TypeError, ValueError) as e:  # a message without role or content, a bad template input
            return error(400, f"the request cannot be formatted: {e}", "invalid_request")
        if counted is None:
            return error(404, f"the model {model!r} is not served here; served: {', '.join(self.served())}",
                         "model_not_found", "model")
        prompt, context = counted
        cap = min(self.limits.max_tokens, context)
        if wanted is not None and wanted > cap:
            return error(400, f"max_tokens {wanted:,} is over this server's limit of {cap:,} (the smaller of "
                              f"--max-tokens {self.limits.max_tokens:,} and the model's context of {context:,})",
                         "max_tokens_too_large", "max_tokens")
        dropped = 0
        if "messages" in req:
            room = min(wanted or context, int(context * FIT_REPLY))
            try:
                req["messages"], dropped, prompt = fit(req["messages"], lambda ms: self.count_prompt(model, {
                    "messages": ms})[0], context - room, prompt)
            except (KeyError, TypeError, ValueError) as e:  # the template refuses what is left (alternation)
                return error(400, f"the request cannot be formatted once its oldest turns are left out: {e}",
                             "invalid_request", "messages")
        if prompt >= context:
            last = "the last turn" + (f" (after leaving out {dropped} earlier message(s))" if dropped else "")
            return error(400, f"this model's context is {context:,} tokens; {last} makes a prompt of {prompt:,}: "
                              "shorten it", "context_length_exceeded", "messages")
        seed = req.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed >= 2 ** 32):
            return error(400, f"seed: expected an integer below 2**32, got {seed!r}", "invalid_seed", "seed")
        if seed is None or seed < 0:  # a negative seed asks for a random one, as in llama.cpp: say which
            seed = req["seed"] = secrets.randbelow(2 ** 31)
        return Adjusted(json.dumps(req).encode(), dropped, prompt, context, seed, self.identity(model))


def fit(messages: list[dict], count: Callable[[list[dict]], int], budget: int,
        counted: int) -> tuple[list[dict], int, int]:
    """(the messages kept, how many were left out, the prompt's tokens): the oldest turns
    leave, a whole exchange at a time (the kept part starts at a user turn), until the
    prompt is within `budget` tokens or only the leading system messages and the last
    exchange (from the last user turn on) are left. `counted` is the whole
    conversation's count. A system message after the first turn leaves with its turn."""
    head = messages[:_first_other(messages)]
    rest = messages[len(head):]
    dropped = 0
    while counted > budget:
        cut = next((i for i in range(1, len(rest)) if isinstance(rest[i], dict) and rest[i].get("role") == "user"),
                   None)
        if cut is None:  # no later user turn to start from: the rest is the last exchange
            break
        rest, dropped = rest[cut:], dropped + cut
        counted = count(head + rest)
    return head + rest, dropped, counted


def _first_other(messages: list[dict]) -> int:
    return next((i for i, m in enumerate(messages) if not (isinstance(m, dict) and m.get("role") == "system")),
                len(messages))


def _not_json(scope) -> tuple[int, dict] | None:
    """llama-cpp-python's routes answer a body sent as a form (curl -d without -H) with a
    500: refuse it here, saying what to send."""
    kind = dict(scope.get("headers") or []).get(b"content-type", b"").split(b";")[0].strip().lower()
    if kind != b"application/json":
        return error(415, f"Content-Type {kind.decode(errors='replace') or '(none)'}: send the body as "
                          "'Content-Type: application/json'", "unsupported_media_type")
    return None


async def _read(receive: Callable[[], Awaitable[dict]], limit: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return b"".join(chunks), False
        part = msg.get("body", b"")
        size += len(part)
        if size > limit:
            return b"", True
        chunks.append(part)
        if not msg.get("more_body"):
            return b"".join(chunks), False


def _with_headers(send, extra: list[tuple[bytes, bytes]]):
    """`send` with `extra` added to the response's headers."""
    async def sending(msg: dict) -> None:
        if msg["type"] == "http.response.start":
            msg = {**msg, "headers": [*msg.get("headers", []), *extra]}
        await send(msg)

    return sending


def _replay(body: bytes, receive: Callable[[], Awaitable[dict]]):
    """The body once, then the client's own messages: a streaming response listens on
    them for the client going away."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _reply(send, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
