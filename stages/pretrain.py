"""What a pretraining run is, before anything is launched (no torch, no Dagster): its
inputs (token shards of one tokenizer), its identity (a key over the recipe and the
data versions) and its directory, `data/<asset>/`, which holds that run's checkpoints
(`step-NNNNNNNN/`), `metrics.jsonl`, `run.json` (config, lineage, MLflow runs) and the
loss curve. A run whose recipe or data changed starts afresh; the old run's files move
to `data/<asset>/previous/<key>/` rather than being deleted. An interrupted run with an
unchanged key resumes from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.config import RUNTIME_FIELDS
from stages.config import YunqueConfig
from stages.store import DataStore, cache_key, write_json
from stages.tokenizer import TOKEN_SHARDS, TOKENIZER

BASE_MODEL = "base_model"
CODE_VERSION = "1"
RUN_FILE = "run.json"
CONFIG_FILE = "train_config.json"


class PretrainError(RuntimeError):
    pass


@dataclass
class RunSpec:
    asset: str
    dir: Path
    key: str
    config: dict[str, Any]  # {"train": ..., "model": ...} as the training program reads it
    lineage: dict[str, Any]  # tokenizer hash, token shard data versions, shards

    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG_FILE

    @property
    def steps(self) -> int:
        return self.config["train"]["steps"]

    def record(self) -> dict[str, Any]:
        path = self.dir / RUN_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def add_mlflow_run(self, run_id: str) -> None:
        rec = self.record()
        rec.setdefault("mlflow_runs", []).append(run_id)
        write_json(self.dir / RUN_FILE, rec)


def token_inputs(store: DataStore, shards: list[str]) -> tuple[str, dict[str, str], int]:
    """(tokenizer hash, {shard: token_shards data version}, vocab size); refuses shards
    that are missing or encoded with another tokenizer, naming them."""
    tok = store.manifest(TOKENIZER)
    if tok is None:
        raise PretrainError("no tokenizer yet: materialize `tokenizer` and `token_shards` first")
    current = tok["stats"]["extra"]["tokenizer_hash"]
    versions, missing, stale = {}, [], []
    for s in shards:
        m = store.manifest(TOKEN_SHARDS, s)
        if m is None:
            missing.append(s)
        elif m["stats"]["extra"].get("tokenizer_hash") != current:
            stale.append(s)
        else:
            versions[s] = m["key"]
    if missing or stale:
        raise PretrainError(f"token shards not ready: missing {missing}, encoded with an older tokenizer {stale}; "
                            "materialize token_shards for them first")
    if not versions:
        raise PretrainError("no token shards to train on")
    return current, versions, tok["stats"]["extra"]["vocab_size"]


def prepare(store: DataStore, shards: list[str], cfg: YunqueConfig, asset: str = BASE_MODEL) -> RunSpec:
    tok_hash, versions, vocab = token_inputs(store, shards)
    model = dataclasses.replace(cfg.model, vocab_size=vocab)
    train = dataclasses.asdict(cfg.train)
    recipe = {k: v for k, v in train.items() if k not in RUNTIME_FIELDS}
    key = cache_key(asset, CODE_VERSION, recipe, dataclasses.asdict(model), tok_hash, versions)
    root = store.dir(asset)
    root.mkdir(parents=True, exist_ok=True)
    _archive_if_changed(root, key)
    train |= {"shards": [str(store.dir(TOKEN_SHARDS, s)) for s in sorted(versions)], "out": str(root),
              "tokenizer": str(store.dir(TOKENIZER))}
    spec = RunSpec(asset, root, key, {"train": train, "model": dataclasses.asdict(model)},
                   {"tokenizer_hash": tok_hash, "token_shards": versions})
    write_json(spec.config_path, spec.config)
    rec = spec.record() | {"key": key, "config": spec.config, "lineage": spec.lineage}
    write_json(root / RUN_FILE, rec)
    return spec


def _archive_if_changed(root: Path, key: str) -> None:
    run = root / RUN_FILE
    if not run.exists():
        return
    old = json.loads(run.read_text()).get("key")
    if old == key:
        return
    dest = root / "previous" / str(old)
    dest.mkdir(parents=True, exist_ok=True)
    for p in root.iterdir():
        if p.name != "previous":
            shutil.move(str(p), dest / p.name)


def read_metrics(root: Path) -> list[dict]:
    path = root / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill
            continue
    return out


def unigram_entropy(shard_dirs: list[str], cap: int = 20_000_000) -> float:
    """Entropy in nats per token of the training tokens' unigram distribution (the first
    `cap` tokens of each shard): the loss of a model that ignores context, which a
    trained model must beat by a wide margin."""
    import numpy as np

    from pipelines.tokens.token_format import TokenShard

    counts = None
    for d in shard_dirs:
        shard = TokenShard.open(d)
        tokens = shard.split("train").tokens[:cap]
        c = np.bincount(tokens, minlength=shard.header["vocab_size"])
        counts = c if counts is None else counts + c
    if counts is None or counts.sum() == 0:
        return float("nan")
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
