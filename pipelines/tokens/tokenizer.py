"""Byte-level BPE: training with Hugging Face `tokenizers`, the files transformers loads,
and the fast document encoder.

The tokenizer is trained and saved with `tokenizers` (so `tokenizer.json` is the
canonical artifact that transformers, vLLM and llama.cpp converters read). Bulk encoding
of the corpus uses a `tiktoken.Encoding` built from the same vocabulary: same split
pattern, each token's bytes as its rank, which gives the same ids (checked on held-out
documents when the tokenizer is trained; the HF encoder is used if they ever differ) at
about twice the speed on this machine (bench/bench_tokenizer.py).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

import xxhash

from pipelines.data.pii import KINDS, PLACEHOLDERS

if TYPE_CHECKING:
    import numpy as np

# GPT-4-style split (letters with an optional leading space or symbol, punctuation runs,
# newlines, whitespace) with one difference: every digit is its own piece, which makes
# arithmetic learnable for small models (Llama and nanochat split numbers similarly).
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)

EOT = "<|endoftext|>"  # between documents; also the padding token
ROLES = ("system", "user", "assistant")
END_OF_TURN = "<|end|>"
REASONING_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
# Control tokens are "special" (decode(skip_special_tokens=True) drops them); the reasoning
# tags are added tokens that are not, so an answer survives the default decoding of
# transformers and vLLM, as Qwen does it. In corpus text the control tokens are plain
# text (a document quoting "<|endoftext|>" does not end there); the tags, being ordinary
# added tokens, are recognised wherever they occur, by both encoders.
CONTROL_TOKENS = [EOT, *(f"<|{r}|>" for r in ROLES), END_OF_TURN]
# The personal-data placeholders (`<EMAIL>`, pipelines.data.pii) are one token each, like
# the tags: a redacted value costs one position, not six, and the model learns one symbol
# for "an address was here" instead of spelling it.
PII_TOKENS = tuple(PLACEHOLDERS[k] for k in KINDS)
TEXT_TOKENS = (*REASONING_TAGS, *PII_TOKENS)  # added tokens recognised in document text
SPECIAL_TOKENS = [*CONTROL_TOKENS, *TEXT_TOKENS]  # ids 0-16, in this order

# Each turn: role token, newline, content, end-of-turn token, newline. The assistant's
# loss (post-training) covers its content and its <|end|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}{% endif %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

TOKENIZER_FILE = "tokenizer.json"
ENCODER_FILE = "encoder.json"  # which encoder reproduces tokenizer.json's ids (see module doc)


class TokenizerError(ValueError):
    """The corpus cannot produce the tokenizer asked for."""


class VocabularyTooLarge(TokenizerError):
    pass


def is_validation(doc_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic split by document: the same doc is held out in every stage and run."""
    h = xxhash.xxh3_64_intdigest(f"{seed}:{doc_id}".encode())
    return h < fraction * 2**64


def in_sample(doc_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic subsample for tokenizer training (independent of the split hash)."""
    return fraction >= 1 or xxhash.xxh3_64_intdigest(f"sample:{seed}:{doc_id}".encode()) < fraction * 2**64


def new_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def reachable_vocab(training_bytes: int, min_frequency: int = 2) -> int:
    """An upper bound on the vocabulary BPE can learn from `training_bytes` of text: the
    bytes and the special tokens, plus one token per merge, and every merge joins at
    least `min_frequency` occurrences of a pair, so takes at least that many tokens off
    a text that starts as `training_bytes` tokens. Known before training: a vocabulary
    far out of reach is refused at once, not after the trainer has read everything."""
    return 256 + len(SPECIAL_TOKENS) + max(0, training_bytes - 1) // max(1, min_frequency)


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2):
    """Train on `texts` (streamed). Raises VocabularyTooLarge when fewer than `vocab_size`
    tokens occur at least `min_frequency` times: the caller asked for more than the data
    supports, and a silently smaller vocabulary would change every downstream shape."""
    from tokenizers import AddedToken, pre_tokenizers, trainers

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # same ids, flag cleared (see CONTROL_TOKENS)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TEXT_TOKENS])
    got = tok.get_vocab_size()
    if got < vocab_size:
        raise VocabularyTooLarge(
            f"the training text supports only {got} tokens seen at least {min_frequency} times, "
            f"fewer than tokenizer.vocab_size={vocab_size}: lower tokenizer.vocab_size to {got} or less, "
            "or add data")
    return tok


def save_pretrained(tok, directory: Path, max_length: int) -> str:
    """Write tokenizer.json and the transformers side files; return the tokenizer hash.
    Written by hand (not by transformers) so the class name is the one every
    transformers version and vLLM know, and the chat template sits in both places
    transformers 4 and 5 read."""
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / TOKENIZER_FILE))
    extra = CONTROL_TOKENS[1:]
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOT, "pad_token": EOT, "bos_token": None, "unk_token": None,
        "additional_special_tokens": extra,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": EOT, "pad_token": EOT, "additional_special_tokens": extra}, indent=2))
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return file_hash(directory / TOKENIZER_FILE)


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:20]


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable unicode table that ByteLevel vocabularies are written in."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tiktoken_encoding(tok, name: str = "yunque"):
    """A tiktoken.Encoding with the same pattern and vocabulary as `tok`."""
    import tiktoken

    dec = _byte_decoder()
    special = set(SPECIAL_TOKENS)
    ranks, specials = {}, {}
    for piece, idx in tok.get_vocab().items():
        if piece in special:
            specials[piece] = idx
        else:
            ranks[bytes(dec[c] for c in piece)] = idx
    return tiktoken.Encoding(name, pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


class DocumentEncoder:
    """Encodes corpus text, where control-token strings are ordinary text (a document that
    contains "<|endoftext|>" must not end itself), and decodes ids back to text."""

    TAGS = frozenset(TEXT_TOKENS)

    def __init__(self, directory: str | Path, backend: str | None = None):
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        path = self.directory / TOKENIZER_FILE
        if not path.exists():
            raise FileNotFoundError(f"no tokenizer at {path}; materialize the tokenizer asset first")
        self.hf = Tokenizer.from_file(str(path))
        self.hf.encode_special_tokens = True  # document text: specials are plain text
        self.hash = file_hash(path)
        meta = self.directory / ENCODER_FILE
        chosen = json.loads(meta.read_text())["backend"] if meta.exists() else "hf"
        self.backend = backend or chosen
        self.tt = tiktoken_encoding(self.hf) if self.backend == "tiktoken" else None
        self.vocab_size = self.hf.get_vocab_size()
        self.eot_id = self.hf.token_to_id(EOT)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def encode_batch(self, texts: Sequence[str], threads: int = 2) -> list[list[int]]:
        if self.tt is not None:
            return self.tt.encode_batch(list(texts), num_threads=threads, allowed_special=self.TAGS,
                                        disallowed_special=())
        return [e.ids for e in self.hf.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_arrays(self, texts: Sequence[str], threads: int = 2) -> list[np.ndarray]:
        """Like encode_batch, as uint32 arrays: tiktoken writes them straight from Rust, so
        no Python int is created per token (a third of the time of encode-then-pack)."""
        if self.tt is None:
            import numpy as np  # loaded when encoding, not with the code location that names this module

            return [np.asarray(ids, np.uint32) for ids in self.encode_batch(texts)]
        fn = partial(self.tt.encode_to_numpy, allowed_special=self.TAGS, disallowed_special=())
        if threads <= 1 or len(texts) < 2:
            return [fn(t) for t in texts]
        with self._pool_lock:  # one pool per encoder, sized on first use
            if self._pool is None:
                self._pool = ThreadPoolExecutor(threads, thread_name_prefix="encode")
        return list(self._pool.map(fn, texts))  # tiktoken releases the GIL while encoding

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text], threads=1)[0]

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)


# Strings that break careless tokenizers: the round-trip check encodes them every time.
PROBES = [
    "", " ", "\n", "\n\n\t  \r\n", "a", "¿Qué tal?", "Ñandú, pingüino, acción, año",
    "e\u0301 (e + combining acute) vs é", "emoji 😀👍🏽 👨‍👩‍👧 🇪🇸", "中文字符 日本語 한국어",
    "control \x00\x01\x07\x1b[0m\x7f", "zero\u200bwidth\u00a0nbsp", "tab\tand\vvertical\f",
    f"literal {EOT} and <|user|> and <answer>42</answer> in text", "12345 + 67890 = 80235",
    "   leading and trailing   ", "x" * 3000, "\U0010ffff \ufffd \ud7ff",
]


@lru_cache(maxsize=4)
def load_encoder(directory: str, tokenizer_hash: str) -> DocumentEncoder:
    """Cached per process and tokenizer content (the hash makes a retrained one a new entry)."""
    return DocumentEncoder(directory)
