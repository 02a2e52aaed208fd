"""A home ready for the post-training chain: the factory's base checkpoint saved again as
pretraining saves it (naming a token shard whose splits hold disjoint token ids, so a
window shows which split it came from) and recorded as base_model's materialization; and
the overrides that keep the chain small. For the chain's own tests and for the
alignment run the chat page's ratings start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.factory import SMALL_POST, record_base, tiny_checkpoint
from yunque import env

SMALL = {**SMALL_POST, "eval.math_problems": 4, "eval.sample_tokens": 8, "eval.math_max_new_tokens": 12,
         "eval.val_batches": 1, "export.gguf": []}
TRAIN_IDS, VAL_IDS = range(5, 150), range(150, 300)  # disjoint: a window shows which split it came from


def replay_shard(root, name: str = "corpus") -> str:
    """A token shard whose train split holds only TRAIN_IDS and whose val split only VAL_IDS."""
    import numpy as np

    from pipelines.tokens.token_format import FORMAT, HEADER, SplitWriter

    d = root / "data" / "token_shards" / name  # where a home keeps them
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    splits = {}
    for split, ids, docs in (("train", TRAIN_IDS, 40), ("val", VAL_IDS, 6)):
        with SplitWriter(d, split, np.dtype("<u2"), eot_id=0) as w:
            w.add([rng.choice(np.array(ids), 60).astype("<u2") for _ in range(docs)], 240 * docs)  # 4 bytes a token
            splits[split] = w.close()
    (d / HEADER).write_text(json.dumps({"format": FORMAT, "dtype": "<u2", "vocab_size": 400, "eot_id": 0,
                                        "tokenizer_hash": "t", "shard": name, "splits": splits}))
    return str(d)


def base_with_shards(root, scratch=None):
    """<root>/data/base_model/step-00000010: the factory's base checkpoint, saved again as
    pretraining saves it, naming the token shards (and window length) it trained on."""
    from model.checkpoint import state as ckpt
    from model.checkpoint.load import load

    loaded = load(tiny_checkpoint((scratch or root) / "factory", context=384))
    shard = replay_shard(root)
    state = {**loaded.state, "train_config": {"shards": [shard], "seq_len": 32, "batch_size": 4}}
    return ckpt.save(root / "data" / "base_model", 10, loaded.model.state_dict(), {}, state,
                     tied=loaded.config.tie_embeddings,
                     tokenizer=loaded.tokenizer.directory).path, shard


def recorded_base_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """<tmp_path>/home as YUNQUE_HOME (its dagster/ as DAGSTER_HOME), holding
    data/base_model/step-00000010 and its record, as pretraining leaves them: naming its
    token shards, which the stages replay (the tiny preset's post.<stage>.replay)."""
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    h = env.use_home(tmp_path / "home")
    record_base(base_with_shards(h, tmp_path)[0])
    return h
