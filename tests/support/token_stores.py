"""A store holding what pretraining starts from, without running the data half: token
shards of a learnable noisy bigram chain committed as the token_shards stage commits them,
a tokenizer output, and the overrides of a model small enough to train on CPU in seconds.
For continued pretraining and for data mixtures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pipelines.tokens.token_format import FORMAT, HEADER, SplitWriter
from stages.asset_names import TOKEN_SHARDS, TOKENIZER
from stages.store.outputs import DataStore, StageStats

VOCAB = 64
SMALL = {"model.dim": 32, "model.n_layers": 2, "model.n_heads": 2, "model.ffn_dim": 64, "model.context": 32,
         "train.steps": 24, "train.batch_size": 4, "train.seq_len": 32, "train.lr": 3e-3, "train.warmup": 2,
         "train.eval_every": 8, "train.eval_batches": 2, "train.checkpoint_every": 4, "train.dtype": "fp32",
         "train.compile": False, "train.warmup_probe_steps": 1, "train.threads": 1, "train.continue_steps": 6}


def bigram_chain(rng: np.random.Generator, n: int = 320) -> np.ndarray:
    """A noisy bigram chain (a fixed successor per token, 10% noise): learnable."""
    seq = [int(rng.integers(1, VOCAB))]
    for _ in range(n - 1):
        seq.append(int(rng.integers(1, VOCAB)) if rng.random() < 0.1 else seq[-1] * 7 % (VOCAB - 1) + 1)
    return np.array(seq, np.uint32)


def add_token_shard(store: DataStore, name: str, seed: int, tok_hash: str = "tok-1") -> None:
    """Commit token shard `name` as the token_shards stage does: arrays, header, manifest."""
    stats = StageStats(key=f"{name}-{seed}-{tok_hash}")

    def write(d: Path) -> list[str]:
        rng, splits = np.random.default_rng(seed), {}
        for split, docs in (("train", 24), ("val", 4)):
            w = SplitWriter(d, split, np.dtype("<u2"), eot_id=0)
            seqs = [bigram_chain(rng) for _ in range(docs)]
            w.add(seqs, sum(len(x) for x in seqs) * 4)
            splits[split] = w.close()
        (d / HEADER).write_text(json.dumps({"format": FORMAT, "dtype": "<u2", "vocab_size": VOCAB, "eot_id": 0,
                                            "tokenizer_hash": tok_hash, "shard": name, "splits": splits}))
        stats.extra.update(tokenizer_hash=tok_hash, train_tokens=splits["train"]["tokens"],
                           val_tokens=splits["val"]["tokens"])
        return [HEADER, "train.bin", "train.idx", "val.bin", "val.idx"]

    store.commit(TOKEN_SHARDS, name, stats, {}, write=write)


def set_tokenizer(store: DataStore, tok_hash: str = "tok-1") -> None:
    """Commit a tokenizer output of hash `tok_hash` (an empty tokenizer.json: nothing reads it)."""
    stats = StageStats(key=tok_hash, extra={"tokenizer_hash": tok_hash, "vocab_size": VOCAB})
    store.commit(TOKENIZER, None, stats, {}, extra_files={"tokenizer.json": "{}"})
