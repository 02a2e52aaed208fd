"""A small built-in set of general conversational turns in the corpus' language (no torch, no
Dagster): greetings, "what can you do?", "who are you?", thanks, goodbye; several phrasings
of each, with short answers that say what the assistant is for (questions about the user's
documentation, math problems). The texts are the language pack's `chat.toml`
(pipelines/languages/<code>/chat.toml). Deterministic: the same list every call, in the SFT
conversation format of pipelines.tasks.post_data.
"""

from __future__ import annotations

from pipelines.tasks import packs


def intents(language: str = "es") -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """{intent: (user phrasings, assistant replies)}, in the pack's order; reply i answers
    phrasing i (cycling). MissingText when the pack has no chat.toml."""
    return {i["name"]: (tuple(i["asks"]), tuple(i["replies"])) for i in packs.texts(language, packs.CHAT)["intents"]}


def conversations(language: str = "es") -> list[list[dict]]:
    """Every phrasing of every intent as a one-turn conversation (user, assistant)."""
    out = []
    for asks, replies in intents(language).values():
        for i, ask in enumerate(asks):
            out.append([{"role": "user", "content": ask}, {"role": "assistant", "content": replies[i % len(replies)]}])
    return out


def records(language: str = "es") -> list[dict]:
    """The conversations as SFT jsonl records, with their intent alongside."""
    return [{"messages": c, "intent": intent} for intent, (asks, _) in intents(language).items()
            for c in conversations(language) if c[0]["content"] in asks]
