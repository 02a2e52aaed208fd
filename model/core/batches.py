"""Token ids and loss masks for post-training.

A conversation is encoded exactly as model.core.chat.ChatTokenizer.encode_chat (the chat
template): `<|role|>` "\\n" content `<|end|>` "\\n" per message. The loss mask covers the
assistant's content and its `<|end|>` (so the model learns to stop), never the role
header, the newline after `<|end|>`, nor any system or user token.

Rows are right-padded: with causal attention the padding after a sequence cannot change
anything before it, so training needs no attention mask (unlike generation's left pad).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model.core.chat import ChatTokenizer

IGNORE = -100


@dataclass
class Encoded:
    ids: list[int]
    trained: list[bool]  # per id: its prediction is trained on


def encode_conversation(tok: ChatTokenizer, messages: Sequence[dict]) -> Encoded:
    ids: list[int] = []
    trained: list[bool] = []
    for m in messages:
        role = m["role"]
        if role not in tok.role_ids:
            raise ValueError(f"unknown chat role {role!r}")
        # the template encodes "\n" + content as one text (as encode_chat does); the newline is
        # the header's unless the tokenizer merged it into the content's first token
        text = tok.encode("\n" + m["content"])
        split = len(tok.newline) if text[:len(tok.newline)] == tok.newline else 0
        head = [tok.role_ids[role], *text[:split]]
        body = [*text[split:], tok.end_id]
        ids += head + body + tok.newline
        learn = role == "assistant"
        trained += [False] * len(head) + [learn] * len(body) + [False] * len(tok.newline)
    return Encoded(ids, trained)


def encode_reply(tok: ChatTokenizer, prompt: Sequence[dict], reply: str) -> Encoded:
    """The prompt with the generation header, then the reply and `<|end|>` (trained)."""
    head = tok.encode_chat(prompt, add_generation_prompt=True)
    body = [*tok.encode(reply), tok.end_id]
    return Encoded(head + body, [False] * len(head) + [True] * len(body))


@dataclass
class Batch:
    idx: torch.Tensor  # (B, T) inputs
    targets: torch.Tensor  # (B, T) next ids, IGNORE where not trained
    mask: torch.Tensor  # (B, T) bool, targets != IGNORE

    def to(self, device: torch.device) -> Batch:
        return Batch(self.idx.to(device), self.targets.to(device), self.mask.to(device))


def collate(rows: Sequence[Encoded], pad_id: int) -> Batch:
    """Inputs are ids[:-1], targets ids[1:] where the target is trained."""
    width = max(len(r.ids) for r in rows) - 1
    idx = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, r in enumerate(rows):
        ids = torch.tensor(r.ids)
        n = len(r.ids) - 1
        idx[i, :n] = ids[:-1]
        keep = torch.tensor(r.trained[1:])
        targets[i, :n] = torch.where(keep, ids[1:], torch.full_like(ids[1:], IGNORE))
    return Batch(idx, targets, targets != IGNORE)


def fit(rows: list[Encoded], max_len: int) -> tuple[list[Encoded], int]:
    """Rows that fit the context, and how many did not (dropped, not cut: a cut reply
    would teach the model to stop mid-answer)."""
    kept = [r for r in rows if len(r.ids) <= max_len and any(r.trained[1:])]
    return kept, len(rows) - len(kept)


class Epochs:
    """Indices of a dataset in batches, a fresh seeded order per epoch; its position is
    two integers, so a resumed run continues with exactly the batch it would have had.
    With several ranks each takes every world-th item of the same global batch."""

    def __init__(self, size: int, batch: int, seed: int, rank: int = 0, world: int = 1):
        if size < 1:
            raise ValueError("no examples to train on")
        self.size, self.batch, self.seed, self.rank, self.world = size, batch, seed, rank, world
        self.epoch, self.cursor = 0, 0

    def _order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self) -> list[int]:
        out: list[int] = []
        while len(out) < self.batch * self.world:
            order = self._order()
            take = order[self.cursor:self.cursor + self.batch * self.world - len(out)]
            out += take
            self.cursor += len(take)
            if self.cursor >= self.size:
                self.epoch, self.cursor = self.epoch + 1, 0
        return out[self.rank::self.world]

    @property
    def epochs_done(self) -> float:
        return self.epoch + self.cursor / self.size

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor = state["epoch"], state["cursor"]
