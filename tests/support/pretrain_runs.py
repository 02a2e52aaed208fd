"""Real pretraining runs on token shards small enough for a CPU: shards of a learnable
noisy bigram chain, a training config for `python -m model.pretrain.train`, the environment
its processes get, an in-process run, and what the run's metrics.jsonl says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pipelines.tokens.token_format import FORMAT, HEADER, SplitWriter
from tests.support import REPO

VOCAB = 64


def make_shards(root: Path, n: int = 2, *, docs: tuple[int, int] = (40, 6), length: int = 320, noise: float = 0.1,
            seed: int = 0, names: tuple[str, ...] = ()) -> list[str]:
    """Token shards of a noisy bigram chain: learnable, so the loss falls. `docs` is
    (train, val) documents per shard, `noise` the share of tokens drawn at random."""
    rng = np.random.default_rng(seed)
    paths = []
    for s in range(n):
        d = root / (names[s] if names else f"s{s}")
        d.mkdir(parents=True)
        splits = {}
        for split, count in zip(("train", "val"), docs):
            with SplitWriter(d, split, np.dtype("<u2"), eot_id=0) as w:
                seqs = []
                for _ in range(count):
                    seq = [int(rng.integers(1, VOCAB))]
                    for _ in range(length - 1):  # a fixed successor of each token, `noise` of them random
                        nxt = seq[-1] * 7 % (VOCAB - 1) + 1
                        seq.append(int(rng.integers(1, VOCAB)) if rng.random() < noise else nxt)
                    seqs.append(np.array(seq, np.uint32))
                w.add(seqs, sum(len(x) for x in seqs) * 4)
                splits[split] = w.close()
        (d / HEADER).write_text(json.dumps({"format": FORMAT, "dtype": "<u2", "vocab_size": VOCAB, "eot_id": 0,
                                            "tokenizer_hash": "t", "shard": d.name, "splits": splits}))
        paths.append(str(d))
    return paths


def write_train_config(tmp: Path, out: str, shards: list[str], **train) -> Path:
    cfg = {"train": {"shards": shards, "out": str(tmp / out), "steps": 30, "batch_size": 4, "seq_len": 32,
                     "lr": 3e-3, "warmup": 5, "eval_every": 10, "eval_batches": 2, "checkpoint_every": 10,
                     "threads": 1, **train},
           "model": {"dim": 32, "n_layers": 2, "n_heads": 2, "ffn_dim": 64, "context": 32, "vocab_size": VOCAB}}
    path = tmp / f"{out}.json"
    path.write_text(json.dumps(cfg))
    return path


def train_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def losses_of(out: Path) -> dict[int, float]:
    """step -> loss, the last record of each step (a resumed run repeats some)."""
    steps = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["event"] == "step":
            steps[r["step"]] = r["loss"]
    return steps


def train_in_process(tmp: Path, out: str, shards: list[str], **train) -> Path:
    from model.core.config import ModelConfig, TrainConfig
    from model.pretrain.train import train as run

    cfg = {"shards": shards, "out": str(tmp / out), "steps": 80, "batch_size": 4, "seq_len": 32, "lr": 1e-2,
           "min_lr": 1e-2, "warmup": 0, "eval_every": 2, "eval_batches": 2, "checkpoint_every": 4, "threads": 1,
           "warmup_probe_steps": 0, "early_stop_patience": 3, **train}
    run(TrainConfig(**cfg), ModelConfig(dim=32, n_layers=2, n_heads=2, ffn_dim=64, context=32, vocab_size=VOCAB))
    return tmp / out


def events_of(out: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == kind]
