"""What a post-training run is before it is launched (no torch, no Dagster): the stage,
the checkpoint it starts from, its identity and its directory `data/<asset>/` (the
same layout as pretraining: stages.training.runs).

The run key covers the stage's recipe, the starting weights (the checkpoint's sha256),
the reward model's weights (PPO) and the content of a user's data file, so retraining
SFT retrains everything after it, and an unchanged chain is not trained twice. A stage
starts from its parent's recorded checkpoint (stages.training.selection.consumed_record), and its
lineage carries that record, so its own record (stages.training.lineage) leads back to the shards.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

from model.checkpoint.files import checksums
from model.post.config import PostRun, SFTConfig
from pipelines.sections import RUNTIME, fields_with
from pipelines.tasks import chitchat, packs
from pipelines.tokens.tokenizer import file_hash
from stages.asset_names import CHAIN, TOKEN_SHARDS
from stages.config import YunqueConfig
from stages.data import domain_qa, human_preferences
from stages.store.keys import cache_key
from stages.store.outputs import DataStore, write_json, write_jsonl
from stages.training.lineage import LineageError
from stages.training.runs import RUN_FILE, PretrainError, RunSpec, archive_if_changed
from stages.training.selection import consumed_record

# Bump when the training program or the built-in data generators (pipelines.tasks.post_data,
# pipelines.tasks.math_tasks) change what a stage computes.
POST_CODE_VERSION = "2"  # 2: the SFT mixture; more math wordings

log = logging.getLogger(__name__)


class PostTrainError(PretrainError):
    pass


def _weights(path: Path) -> dict:
    sums = checksums(path)
    return {k: sums[k] for k in ("model.safetensors", "heads.safetensors") if k in sums}


def _upstream(store: DataStore, asset: str) -> tuple[dict, Path]:
    """(record, checkpoint path) of `asset` as recorded; its refusal as a PostTrainError."""
    try:
        rec, found = consumed_record(store, asset)
    except LineageError as e:
        raise PostTrainError(str(e)) from e
    return rec, found.path


def replay_shards(store: DataStore, init: Path) -> list[str]:
    """The token shards the base model trained on (its train_config, carried down the chain
    in every checkpoint's state), resolved in this store as checkpoints are: a home can be
    moved. model/post/replay.py reads their train split."""
    recorded = json.loads((init / "state.json").read_text()).get("train_config", {}).get("shards", [])
    for s in recorded:  # a home on an object store: into this machine's cache first
        store.sync(TOKEN_SHARDS, Path(s).name)
    here = [store.verified(TOKEN_SHARDS, Path(s).name) if store.manifest(TOKEN_SHARDS, Path(s).name)
            else store.dir(TOKEN_SHARDS, Path(s).name) for s in recorded]
    return [str(h) if (h / "header.json").exists() else s for h, s in zip(here, recorded)]


def sft_sources(store: DataStore, scfg: SFTConfig, shards: list[str], language: str = "es") -> dict[str, list[dict]]:
    """The SFT mixture's generated sources in `language`, as SFT jsonl records: at most
    `domain_qa` of the corpus' question-answer pairs (train documents of `shards` only; a
    deterministic sample spread over shards and documents), and `chitchat` conversational
    turns. A source whose pack file the language lacks (qa.toml, chat.toml) is left out."""
    out: dict[str, list[dict]] = {}
    if scfg.domain_qa and packs.has(language, packs.QA):
        # the base model's shards whose document split exists (the token_shards stage writes it)
        names = sorted(set(domain_qa.encoded_shards(store)) & {Path(s).name for s in shards})
        pairs = sorted(domain_qa.train_pairs(store, names, language=language), key=domain_qa.order_key)
        if pairs:
            out["domain_qa"] = pairs[: scfg.domain_qa]
    if scfg.chitchat and packs.has(language, packs.CHAT):
        turns = chitchat.records(language)
        out["chitchat"] = [turns[i % len(turns)] for i in range(scfg.chitchat)]
    return out


def nothing_to_train(stage: str, language: str, data: str, generated: dict, human: dict | None) -> str | None:
    """Why the stage would have nothing to train on in `language` (its pack lacks the files
    of the built-in sets and no file of the user's stands in), or None."""
    rl = stage in ("ppo", "grpo")  # its prompts' instruction is math.toml's, whoever wrote the problems
    if packs.has(language, packs.MATH) or (data and not rl):
        return None
    if stage == "sft":
        return None if generated or human else \
            f"post.sft has nothing to train on: {packs.left_out(language)}, or give post.sft.data (a jsonl of conversations)"
    left = packs.left_out(language, (packs.MATH,))
    if rl:
        return f"post.{stage} asks its math problems in the corpus' language: {left}"
    return (f"post.{stage}'s built-in preference pairs are math problems: {left}, or give post.{stage}.data (a jsonl "
            "of preference pairs)")


def prepare_post(store: DataStore, cfg: YunqueConfig, asset: str) -> RunSpec:
    stage, parent = CHAIN[asset]
    scfg = getattr(cfg.post, stage)  # checked with the rest of the tree (stages.config.check)
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
    shards = replay_shards(store, init)
    generated = sft_sources(store, scfg, shards, cfg.language) if isinstance(scfg, SFTConfig) else {}
    if generated:  # what the mixture holds is part of the run: other pairs, another run
        lineage["mixture"] = {n: {"records": len(r), "sha256": domain_qa.pairs_key(r)} for n, r in generated.items()}
    human = human_preferences.for_stage(store, stage) if scfg.human_weight > 0 else None
    if why := nothing_to_train(stage, cfg.language, data, generated, human):
        raise PostTrainError(why)
    if left := packs.left_out(cfg.language):  # the one line: what the pack lacks and what is left out
        log.warning("%s: %s", asset, left)
        lineage["left_out"] = left
    if human:  # the ratings' version travels in the lineage: `yunque lineage` names it
        lineage["human_preferences"] = human | {"weight": scfg.human_weight}
    runtime = set(fields_with(type(scfg), RUNTIME))
    # human_weight only counts with ratings to weigh: without them the key is what it was
    recipe = {k: v for k, v in dataclasses.asdict(scfg).items() if k not in runtime and k != "human_weight"}
    data_key = lineage["data"]["sha256"] if data else lineage["data"]
    key = cache_key(asset, POST_CODE_VERSION, recipe, lineage["init"]["weights_sha256"],
                    lineage.get("reward_model", {}).get("weights_sha256"), data_key, lineage.get("mixture"),
                    *([{k: human[k] for k in ("version", "examples")} | {"weight": scfg.human_weight}]
                      if human else []),
                    cfg.section_hash("language"))  # the built-in sets' wordings and the prompts' instruction
    root = store.dir(asset)
    root.mkdir(parents=True, exist_ok=True)
    archive_if_changed(root, key)
    mixture = {n: str(write_jsonl(r, root / "mixture" / f"{n}.jsonl")) for n, r in generated.items()}
    if human:  # a copy in the run's directory: a resumed run reads the ratings it was keyed on
        (root / "mixture").mkdir(exist_ok=True)
        human_copy = root / "mixture" / "human.jsonl"
        shutil.copyfile(human["path"], human_copy)
    config = PostRun(stage=stage, train=scfg, init=str(init), out=str(root), data=data,
                     reward_model=str(reward) if reward else "", mixture=mixture, replay_shards=shards,
                     human=str(human_copy) if human else "",
                     lineage=lineage, language=cfg.language).to_json()
    spec = RunSpec(asset, root, key, config, lineage)
    write_json(spec.config_path, config)
    write_json(root / RUN_FILE, spec.record() | {"key": key, "config": config, "lineage": lineage})
    store.publish(asset)
    return spec
