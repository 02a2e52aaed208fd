"""The tokenizer as generation and post-training use it: chat conversations to ids (the
same ids transformers' `apply_chat_template` gives for the exported tokenizer), ids
back to text, and the ids that end a generation.

Conversation content is encoded as text: a user who types "<|end|>" gets those
characters, not the end-of-turn token (the control tokens come only from the roles).
The reasoning tags (<think>, <answer> ...) are ordinary added tokens, recognised in
content as they are in the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipelines.tokens.tokenizer import END_OF_TURN, EOT, ROLES, TOKENIZER_FILE


class ChatTokenizer:
    def __init__(self, directory: str | Path):
        from tokenizers import Tokenizer

        path = Path(directory) / TOKENIZER_FILE
        if not path.exists():
            raise FileNotFoundError(f"no tokenizer at {path}")
        self.directory = Path(directory)
        self.text = Tokenizer.from_file(str(path))
        self.text.encode_special_tokens = True  # content is text, whatever it contains
        self.vocab_size = self.text.get_vocab_size()
        self.eot_id = self._id(EOT)
        self.end_id = self._id(END_OF_TURN)
        self.role_ids = {r: self._id(f"<|{r}|>") for r in ROLES}
        self.newline = self.encode("\n")

    def _id(self, token: str) -> int:
        idx = self.text.token_to_id(token)
        if idx is None:
            raise ValueError(f"{self.directory}: the tokenizer has no {token!r} token")
        return idx

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """A turn ends with <|end|>; a base model ends a document with <|endoftext|>."""
        return (self.end_id, self.eot_id)

    def encode(self, text: str) -> list[int]:
        return self.text.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.text.decode(list(ids), skip_special_tokens=False)

    def encode_chat(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> list[int]:
        """pipelines.tokens.tokenizer.CHAT_TEMPLATE, segment by segment: <|role|> "\\n" content
        <|end|> "\\n" per message, then <|assistant|> "\\n" to prompt a reply."""
        ids: list[int] = []
        for m in messages:
            role = m.get("role")
            if role not in self.role_ids:
                raise ValueError(f"unknown chat role {role!r} (expected one of {list(self.role_ids)})")
            ids += [self.role_ids[role], *self.encode("\n" + m["content"]), self.end_id, *self.newline]
        if add_generation_prompt:
            ids += [self.role_ids["assistant"], *self.newline]
        return ids


def fit_history(tok: ChatTokenizer, messages: Sequence[dict], room: int) -> tuple[list[dict], int]:
    """The most recent whole turns whose chat ids fit in `room` tokens, a leading system
    message kept, and how many messages were dropped. Dropping whole turns (rather than
    cutting ids from the left) keeps every kept message intact and the role tokens in
    place; the newest message always stays, even if it alone is too long."""
    system = list(messages[:1]) if messages and messages[0].get("role") == "system" else []
    rest = list(messages[len(system):])
    dropped = 0
    while len(rest) > 1 and len(tok.encode_chat(system + rest)) > room:
        rest = rest[1:]
        dropped += 1
    return system + rest, dropped
