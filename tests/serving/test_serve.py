"""`yunque serve` for real: llama-cpp-python's OpenAI-compatible server on tiny exports,
answering the official `openai` client (chat, streaming, completions) offline, giving the
same greedy answer as `yunque chat`, refusing bad input with HTTP errors, recording
ratings durably (a kill -9 right after "saved" loses nothing), requiring the API key off
loopback, and following the registry's champion alias without a restart."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.support.serve_server import YUNQUE, Server, exports, request

pytest.importorskip("llama_cpp.server.app")
openai = pytest.importorskip("openai")

Q = [{"role": "user", "content": "¿Cuánto es 2 más 3?"}]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return exports(tmp_path_factory.mktemp("serve-exports"))


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve-home"), "--model", str(models["answers"]), "--compare",
               str(models["random"]), "--quant", "f32")
    yield s
    s.stop()


def client(server: Server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key or "unused", max_retries=0)


def test_the_openai_client_chats_streams_and_completes(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == ["answers", "random"]
    r = c.chat.completions.create(model="answers", messages=Q, max_tokens=24, temperature=0)
    assert r.choices[0].message.content == "<answer>42</answer>"
    assert r.choices[0].finish_reason == "stop"  # <|end|> ends the turn, from the GGUF's own metadata
    assert r.usage.prompt_tokens > 5
    streamed = c.chat.completions.create(model="answers", messages=Q, max_tokens=24, temperature=0, stream=True)
    parts = [ch.choices[0].delta.content for ch in streamed if ch.choices and ch.choices[0].delta.content]
    assert len(parts) > 1 and "".join(parts) == "<answer>42</answer>"
    done = c.completions.create(model="random", prompt="La casa del sistema", max_tokens=8, temperature=0)
    assert done.choices[0].text and done.model == "random"


def test_concurrent_streams_each_get_their_whole_answer(server):
    """Requests that arrive together wait their turn (serving.limits queues them):
    none is interrupted or cut short by another."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(i: int) -> tuple[str, str | None]:
        parts, reason = [], None
        for ch in client(server).chat.completions.create(
                model="answers" if i % 2 == 0 else "random", messages=Q, max_tokens=16, temperature=0, stream=True):
            if ch.choices:
                parts.append(ch.choices[0].delta.content or "")
                reason = ch.choices[0].finish_reason or reason
        return "".join(parts), reason

    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(ask, range(6)))
    assert [r for i, r in enumerate(replies) if i % 2 == 0] == [("<answer>42</answer>", "stop")] * 3
    odd = [r for i, r in enumerate(replies) if i % 2]
    assert len(set(odd)) == 1 and odd[0][1] in ("stop", "length")  # the other model, the same each time


def _chat_cli(checkpoint: str, question: str, tokens: int) -> str:
    out = subprocess.run([str(YUNQUE), "chat", "--checkpoint", checkpoint, "--temperature", "0",
                          "--max-new-tokens", str(tokens)], input=f"{question}\n/exit\n", capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return out.split("> ", 1)[1].split("\n> ", 1)[0].rstrip("\n")


def test_yunque_chat_and_the_endpoint_give_the_same_greedy_answer(server, models):
    """The chat template travels in the GGUF: the endpoint formats a conversation as
    training did, so the f32 file's greedy reply is `yunque chat`'s (and so is a plain
    completion's)."""
    checkpoint = (models["answers"] / "checkpoint.txt").read_text()
    c = client(server)
    endpoint = c.chat.completions.create(model="answers", messages=Q, max_tokens=24, temperature=0)
    assert _chat_cli(checkpoint, Q[0]["content"], 24) == endpoint.choices[0].message.content
    random_ckpt = (models["random"] / "checkpoint.txt").read_text()
    # A prompt whose greedy reply is text: a reply of bare bytes that are no UTF-8 (a random
    # model may answer with sixteen 0xD0 bytes) prints as U+FFFD each here and is decoded
    # otherwise by llama-cpp-python, though both sampled the same token ids. Which prompts
    # give text changes with the tokenizer's vocabulary: the first of these that does.
    prompt = _text_prompt(random_ckpt, ["La red del usuario", "La casa del sistema", "El archivo de",
                                        "Para instalar el", "Una ventana nueva", "El servidor de correo"])
    ours = subprocess.run([str(YUNQUE), "generate", "--checkpoint", random_ckpt, "--prompt", prompt,
                           "--max-new-tokens", "16"], capture_output=True, text=True, timeout=300, check=True).stdout
    assert "\ufffd" not in ours, ours
    theirs = c.completions.create(model="random", prompt=prompt, max_tokens=16, temperature=0)
    assert ours.rstrip("\n") == theirs.choices[0].text


def _text_prompt(checkpoint: str, prompts: list[str], margin: float = 0.05) -> str:
    """The first prompt whose greedy 16-token continuation decodes to text (no U+FFFD) and
    never comes near a tie (top two logits `margin` apart at every step): a random model's
    near-ties go either way between torch and llama.cpp's f32 arithmetic."""
    import torch

    from model.checkpoint.load import load

    loaded = load(checkpoint)
    tok = loaded.tokenizer
    for prompt in prompts:
        ids, closest = tok.encode(prompt), float("inf")
        with torch.no_grad():
            for _ in range(16):
                logits, _ = loaded.model(torch.tensor([ids]))
                top = torch.topk(logits[0, -1].float(), 2).values
                closest = min(closest, float(top[0] - top[1]))
                ids.append(int(logits[0, -1].argmax()))
        out = tok.decode(ids[len(tok.encode(prompt)):])
        if "\ufffd" not in out and out.strip() and closest > margin:
            return prompt
    raise AssertionError(f"none of {prompts} gives the random model a clear reply that is text")


def test_a_conversation_longer_than_the_context_loses_its_oldest_turns_and_says_so(server):
    """The model's context is 64 tokens: ten exchanges do not fit. The oldest leave, whole
    exchanges at a time, the system message stays, and the headers say what was sent."""
    system = {"role": "system", "content": "Responde."}
    turns = [m for i in range(10) for m in ({"role": "user", "content": f"¿Cuánto es {i} más 1?"},
                                             {"role": "assistant", "content": "<answer>42</answer>"})]
    raw = client(server).chat.completions.with_raw_response.create(
        model="answers", messages=[system, *turns, *Q], max_tokens=8, temperature=0)
    h = raw.headers
    dropped, prompt, context = (int(h[f"x-yunque-{k}"]) for k in ("dropped-messages", "prompt-tokens", "context"))
    assert context == 64 and 0 < dropped <= len(turns) and dropped % 2 == 0
    assert prompt + 8 <= context and int(h["x-yunque-reply-room"]) == context - prompt
    assert raw.parse().choices[0].message.content == "<answer>42</answer>"
    assert raw.parse().usage.prompt_tokens == prompt  # what llama.cpp saw is what the header says


def test_the_fit_keeps_the_system_message_and_the_last_turn():
    from serving.limits import fit

    msgs = [{"role": "system", "content": "s"}] + [{"role": r, "content": "x" * 10} for r in ["user", "assistant"] * 4]
    msgs.append({"role": "user", "content": "q"})

    def size(ms):
        return sum(len(m["content"]) for m in ms)

    kept, dropped, n = fit(msgs, size, 25, size(msgs))
    assert (kept[0], kept[1]["role"], kept[-1], dropped, n) == (msgs[0], "user", msgs[-1], 6, 22)
    assert fit(msgs, size, 0, size(msgs))[:2] == ([msgs[0], msgs[-1]], 8)  # never the last turn
    assert fit(msgs, size, 100, size(msgs)) == (msgs, 0, size(msgs))


def test_sampling_takes_a_new_seed_per_request_unless_given_one(server):
    """At temperature 1 the same prompt gives different replies (llama-cpp-python alone
    repeats the same "sample" after a model load); a request's own seed repeats its reply."""
    c = client(server).chat.completions

    def ask(**kw) -> tuple[str, str]:
        raw = c.with_raw_response.create(model="random", messages=Q, max_tokens=12, temperature=1.0, **kw)
        return raw.parse().choices[0].message.content, raw.headers["x-yunque-seed"]

    replies = [ask() for _ in range(4)]
    assert len({seed for _, seed in replies}) == 4 and len({text for text, _ in replies}) > 1, replies
    assert ask(seed=7) == ask(seed=7) and ask(seed=7)[1] == "7"
    assert ask(seed=-1)[1] != "-1"  # a negative seed asks for a random one: the header says which
    status, said = server.post("/v1/chat/completions", {"model": "random", "messages": Q, "seed": 2 ** 40})
    assert status == 400 and said["error"]["code"] == "invalid_seed"


def test_the_headers_say_who_answered(server):
    """A rating names the weights that wrote the answer: the server's word, taken when it
    accepted the request (a promotion may swap the model between the page's list and the
    reply), not the list the page loaded."""
    _, listed = server.get("/yunque/models")
    for m in listed["models"]:
        raw = client(server).chat.completions.with_raw_response.create(model=m["id"], messages=Q, max_tokens=2)
        h = raw.headers
        assert (h["x-yunque-model"], h["x-yunque-version"], h["x-yunque-weights"]) == (
            m["id"], m["version"], m["weights_sha256"])


def test_the_docs_transcript_script_gives_the_servers_own_replies(server):
    """bench.doc_transcripts writes docs/serve.md's transcript from a served model: what it
    records is what the endpoint answers (tests/test_docs.py checks the page holds it)."""
    from bench.doc_transcripts import ask, identity, render

    replies = ask(server.url, ["¿Cuánto es 2 más 3?"], "answers")
    assert replies == ["<answer>42</answer>"]
    who = identity(server.url, "answers")
    shown = render({"model": who, "questions": ["¿Cuánto es 2 más 3?"], "replies": replies})
    assert "> ¿Cuánto es 2 más 3?\n<answer>42</answer>\n```" in shown and who["weights_sha256"][:12] in shown


def test_v1_models_says_who_each_model_is(server):
    listed = client(server).models.list().data
    assert [m.id for m in listed] == ["answers", "random"]
    who = listed[0].model_extra["yunque"]
    assert len(who["weights_sha256"]) == 64 and who["context"] == 64
    assert who["feedback"] == {"version": "none", "ratings": 0}  # exports of checkpoints no rating trained


@pytest.mark.parametrize("body, status, code", [
    (b"{not json", 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_json"),
    ({"model": "nobody", "messages": Q}, 404, "model_not_found"),
    ({"model": "answers", "messages": Q, "max_tokens": 10 ** 9}, 400, "max_tokens_too_large"),
    ({"model": "answers", "messages": Q, "max_tokens": -3}, 400, "invalid_max_tokens"),
    ({"model": "answers", "messages": []}, 400, "invalid_messages"),
    ({"model": "answers", "messages": [{"role": "user", "content": "palabra " * 400}]}, 400,
     "context_length_exceeded"),
    ({"model": "answers", "stream": True, "messages": [{"role": "user", "content": "palabra " * 400}]}, 400,
     "context_length_exceeded"),
    (b"x" * 1_100_000, 413, "body_too_large"),
])
def test_bad_input_gets_an_http_error_and_the_server_stays_up(server, body, status, code):
    got, payload = server.post("/v1/chat/completions", body)
    assert got == status and payload["error"]["code"] == code, payload
    assert payload["error"]["message"]
    ok, _ = server.post("/v1/chat/completions", {"model": "answers", "messages": Q, "max_tokens": 4})
    assert ok == 200


def test_a_body_not_sent_as_json_is_refused_with_415(server):
    import urllib.request

    body = json.dumps({"model": "answers", "messages": Q}).encode()
    req = urllib.request.Request(f"{server.url}/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})  # curl -d
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(req, timeout=60)
    assert e.value.code == 415 and "application/json" in json.loads(e.value.read())["error"]["message"]


def test_ratings_are_checked_and_duplicates_refused(server):
    status, listed = server.get("/yunque/models")
    ids = {m["id"]: m for m in listed["models"]}
    a, b = ids["answers"], ids["random"]
    rec = {"id": "rating-1", "kind": "compare", "messages": Q, "choice": "a", "edited": "Son 5.",
           "answers": [{"model": "answers", "version": a["version"], "weights_sha256": a["weights_sha256"],
                        "text": "<answer>42</answer>"},
                       {"model": "random", "version": b["version"], "weights_sha256": b["weights_sha256"],
                        "text": "mamama"}]}
    status, saved = server.post("/yunque/feedback", rec)
    assert status == 201 and saved["saved"] and saved["ratings"] >= saved["position"] >= 1
    status, again = server.post("/yunque/feedback", rec)
    assert status == 409 and again["position"] == saved["position"]  # a resubmission is not counted twice
    assert server.post("/yunque/feedback", rec | {"id": "rating-2", "choice": "up"})[0] == 400
    forged = {**rec, "id": "rating-3", "answers": [rec["answers"][0] | {"weights_sha256": "0" * 64}, rec["answers"][1]]}
    status, said = server.post("/yunque/feedback", forged)
    assert status == 400 and "never served" in said["error"]
    assert server.post("/yunque/feedback", b"{")[0] == 400


def test_a_kill_right_after_saved_loses_nothing_and_off_loopback_needs_the_key(models, tmp_path):
    refused = subprocess.run([str(YUNQUE), "serve", "--model", str(models["answers"]), "--host", "0.0.0.0"],
                             capture_output=True, text=True, timeout=300, check=False,
                             env={"YUNQUE_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert refused.returncode == 2 and "YUNQUE_API_KEY" in refused.stderr
    home = tmp_path / "home"
    s = Server(home, "--model", str(models["answers"]), env={"YUNQUE_API_KEY": "s3cret"})
    try:
        assert request(f"{s.url}/v1/models")[0] == 401
        assert request(f"{s.url}/yunque/feedback", {"id": "x"})[0] == 401
        m = s.get("/yunque/models")[1]["models"][0]
        for i in range(5):
            rec = {"id": f"r{i}", "kind": "rate", "messages": Q, "choice": "up",
                   "answers": [{"model": m["id"], "version": m["version"], "weights_sha256": m["weights_sha256"],
                                "text": f"respuesta {i}"}]}
            assert s.post("/yunque/feedback", rec)[0] == 201
        s.kill()  # right after the fifth "saved"
    finally:
        s.stop()
    lines = (home / "feedback" / "ratings.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [f"r{i}" for i in range(5)]
    again = Server(home, "--model", str(models["answers"]), env={"YUNQUE_API_KEY": "s3cret"})
    try:
        assert again.get("/yunque/feedback")[1]["ratings"] == 5
        assert again.post("/yunque/feedback", {**json.loads(lines[0]), "time": None})[0] == 409
    finally:
        again.stop()


def test_the_champion_alias_is_followed_without_a_restart(models, tmp_path):
    from resources.tracking import MlflowTracking

    home = tmp_path / "home"
    mlflow = MlflowTracking(home=str(home))

    def promote(export) -> str:
        run = mlflow.start_run("promotion", {}, {})
        mlflow.log_dir(run, export, "model")
        version = mlflow.register_version("yunque", "champion", run, "model", {})
        mlflow.finish(run, "FINISHED")
        return version

    assert promote(models["answers"]) == "1"
    s = Server(home, "--watch-seconds", "1")  # --model champion is the default
    try:
        first = s.get("/yunque/models")[1]["models"][0]
        assert (first["id"], first["version"]) == ("champion", "1")
        ask = {"model": "champion", "messages": Q, "max_tokens": 8, "temperature": 0}
        assert s.post("/v1/chat/completions", ask)[1]["choices"][0]["message"]["content"] == "<answer>42</answer>"
        assert promote(models["random"]) == "2"
        deadline = time.monotonic() + 60
        while s.get("/yunque/models")[1]["models"][0]["version"] != "2":
            assert time.monotonic() < deadline, (home / f"serve-{s.port}.log").read_text()
            time.sleep(0.5)
        now = s.get("/yunque/models")[1]["models"][0]
        assert now["weights_sha256"] != first["weights_sha256"]
        reply = s.post("/v1/chat/completions", ask)[1]["choices"][0]["message"]["content"]
        assert reply != "<answer>42</answer>"  # the new weights answer
        assert s.post("/yunque/reload", {})[1]["champion"].startswith("unchanged (version 2)")
    finally:
        s.stop()
