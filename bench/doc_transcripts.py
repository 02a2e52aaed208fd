"""The transcript in docs/serve.md, made by the model it describes: `yunque serve` on the
home's champion (the main command's model), asked the questions below greedily through
the OpenAI-compatible endpoint, exactly as the page's example asks them.

    python -m bench.doc_transcripts [--home H] [--model champion] [--write]

Without --write it prints the transcript and says whether docs/serve.md holds it; with
--write it records it in docs/transcripts.json and the block of docs/serve.md between
the markers (tests/test_docs.py checks that the page holds what the JSON recorded, and
tests/serving/test_serve.py that `ask` gives a server's own replies).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from bench.common import yunque_home

DOCS = Path(__file__).resolve().parent.parent / "docs"
RECORD = DOCS / "transcripts.json"
PAGE = DOCS / "serve.md"
BEGIN = "<!-- transcript: made by `python -m bench.doc_transcripts --write`; do not edit by hand -->"
END = "<!-- /transcript -->"
QUESTIONS = ["Calcula 12 + 45.", "¿Cuánto es 7 más 8?", "¿Para qué sirve apt-get update?"]
MAX_TOKENS = 64


def _get(url: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    with opener.open(req, timeout=300) as r:
        return json.loads(r.read())


def ask(url: str, questions: list[str], model: str) -> list[str]:
    """The server's greedy reply to each question, each a conversation of its own."""
    return [_get(f"{url}/v1/chat/completions", {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS,
                                                "messages": [{"role": "user", "content": q}]})
            ["choices"][0]["message"]["content"] for q in questions]


def identity(url: str, model: str) -> dict:
    """Who answered: /v1/models' record of the served model."""
    return next(m["yunque"] for m in _get(f"{url}/v1/models")["data"] if m["id"] == model)


def render(record: dict) -> str:
    who = record["model"]
    said = (f"What the main command's model answers (`{who['id']}`, registry version {who['version']}, weights "
            f"`{who['weights_sha256'][:12]}`, `{who['file']}`), greedy, {MAX_TOKENS} new tokens at most:")
    lines = [BEGIN, "", said, "", "```"]
    for q, a in zip(record["questions"], record["replies"]):
        lines += [f"> {q}", a, ""]
    return "\n".join([*lines[:-1], "```", "", END])


def page_block(text: str) -> str | None:
    """The transcript block of a page, or None if it has none."""
    if BEGIN not in text or END not in text:
        return None
    start = text.index(BEGIN)
    return text[start:text.index(END, start) + len(END)]


def main() -> int:
    from bench.bench_serve import Server

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--home", default=None, help="a home after the main command (default $YUNQUE_HOME or ./.yunque)")
    p.add_argument("--model", default="champion")
    p.add_argument("--write", action="store_true", help="record it in docs/transcripts.json and docs/serve.md")
    args = p.parse_args()
    server = Server(Path(args.home or yunque_home()), "--model", args.model, "--threads", "1")
    url = f"http://127.0.0.1:{server.port}"
    try:
        record = {"model": identity(url, args.model), "questions": QUESTIONS,
                  "replies": ask(url, QUESTIONS, args.model)}
    finally:
        server.stop()
    block = render(record)
    print(block)
    text = PAGE.read_text()
    held = page_block(text)
    if args.write:
        RECORD.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        PAGE.write_text(text.replace(held, block) if held else text)
        print(f"written: {RECORD}" + (f", {PAGE}" if held else f" ({PAGE} has no transcript markers)"))
        return 0
    print(f"{PAGE}: " + ("holds this transcript" if held == block else "differs: run with --write"))
    return 0 if held == block else 1


if __name__ == "__main__":
    sys.exit(main())
