"""What a post-training run is before it is launched (no torch, no Dagster): the stage,
the checkpoint it starts from, its identity and its directory `data/<asset>/` (the
same layout as pretraining: stages.pretrain).

The run key covers the stage's recipe, the starting weights (the checkpoint's sha256),
the reward model's weights (PPO) and the content of a user's data file, so retraining
SFT retrains everything after it, and an unchanged chain is not trained twice. A stage
starts from its parent's recorded checkpoint (stages.selection.consumed_record), and its
lineage carries that record, so its own record (stages.lineage) leads back to the shards.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from model.post_config import POST_RUNTIME_FIELDS, check
from pipelines.tokens.tokenizer import file_hash
from stages.config import YunqueConfig
from stages.lineage import LineageError
from stages.pretrain import RUN_FILE, PretrainError, RunSpec, _archive_if_changed
from stages.selection import consumed_record
from stages.store import DataStore, cache_key, write_json

# Bump when the training program or the built-in data generators (pipelines.tasks.post_data,
# pipelines.tasks.math_tasks) change what a stage computes.
POST_CODE_VERSION = "1"
# asset: (stage in YunqueConfig.post, the asset it starts from)
CHAIN = {
    "sft_model": ("sft", "base_model"),
    "reward_model": ("reward", "sft_model"),
    "dpo_model": ("dpo", "sft_model"),
    "ppo_model": ("ppo", "dpo_model"),
    "grpo_model": ("grpo", "ppo_model"),
}


class PostTrainError(PretrainError):
    pass


def _weights(path: Path) -> dict:
    sums = json.loads((path / "checksums.json").read_text())
    return {k: sums[k] for k in ("model.safetensors", "heads.safetensors") if k in sums}


def _upstream(store: DataStore, asset: str) -> tuple[dict, Path]:
    """(record, checkpoint path) of `asset` as recorded; its refusal as a PostTrainError."""
    try:
        rec, found = consumed_record(store, asset)
    except LineageError as e:
        raise PostTrainError(str(e)) from e
    return rec, found.path


def prepare_post(store: DataStore, cfg: YunqueConfig, asset: str) -> RunSpec:
    stage, parent = CHAIN[asset]
    scfg = getattr(cfg.post, stage)
    check(stage, scfg)
    parent_rec, init = _upstream(store, parent)
    reward_rec, reward = _upstream(store, "reward_model") if stage == "ppo" else (None, None)
    data = scfg.data
    if data and not Path(data).is_file():
        raise PostTrainError(f"post.{stage}.data: no such file {data}")
    lineage = {
        "init": {"asset": parent, "checkpoint": str(init), "weights_sha256": _weights(init)},
        "data": {"path": data, "sha256": file_hash(Path(data))} if data else f"built-in {scfg.math_level}",
        # the parent's record as consumed: the chain back to the token shards and raw shards
        "parent": parent_rec,
    }
    if reward is not None:
        lineage["reward_model"] = {"checkpoint": str(reward), "weights_sha256": _weights(reward),
                                   "record": reward_rec}
    recipe = {k: v for k, v in dataclasses.asdict(scfg).items() if k not in POST_RUNTIME_FIELDS}
    data_key = lineage["data"]["sha256"] if data else lineage["data"]
    key = cache_key(asset, POST_CODE_VERSION, recipe, lineage["init"]["weights_sha256"],
                    lineage.get("reward_model", {}).get("weights_sha256"), data_key)
    root = store.dir(asset)
    root.mkdir(parents=True, exist_ok=True)
    _archive_if_changed(root, key)
    config = {"stage": stage, "train": dataclasses.asdict(scfg), "init": str(init), "data": data,
              "reward_model": str(reward) if reward else "", "out": str(root), "lineage": lineage}
    spec = RunSpec(asset, root, key, config, lineage)
    write_json(spec.config_path, config)
    write_json(root / RUN_FILE, spec.record() | {"key": key, "config": config, "lineage": lineage})
    store.publish(asset)
    return spec
