"""What a pretraining run is, before anything is launched (no torch, no Dagster): its
inputs (token shards of one tokenizer), its identity (a key over the recipe and the
data versions) and its directory, `data/<asset>/`, with that run's checkpoints, metrics,
run.json and loss curve. An unchanged key resumes; a changed one moves the old run to
`previous/<key>/` and either continues it (only the token shards changed, none gone, and
it finished: new shards mixed with a replay of old ones) or trains from scratch, the
reason in its lineage. What the stages consume is the run's best checkpoint (`stages.training.runs.run_end`).
docs/pretraining.md#continued-pretraining.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.checkpoint.files import (
    all_checkpoints,
    latest,
    weights_sha256,
)
from model.core.config import PretrainRun, TrainConfig
from pipelines.sections import recipe_fields
from stages.asset_names import BASE_MODEL, TOKEN_SHARDS, TOKENIZER
from stages.config import YunqueConfig
from stages.data.decontamination import DecontaminationError, eval_pairs, training_shards
from stages.store.keys import cache_key
from stages.store.outputs import DataStore, write_json, write_jsonl
from stages.training import cost, mixture
from stages.training.runs import RUN_FILE, PretrainError, RunSpec, archive_if_changed, ended

CODE_VERSION = "1"
DOWNSTREAM_FILE = "downstream_qa.jsonl"  # the pairs the evaluations during training score


def token_inputs(store: DataStore, shards: list[str]) -> tuple[str, dict[str, str], int]:
    """(tokenizer hash, {shard: token_shards data version}, vocab size); refuses shards
    that are missing or encoded with another tokenizer, naming them. A shard with no
    tokens at all (nothing survived the filters) is not an input: it cannot change what a
    run computes, so it does not change the run's key either."""
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
        elif not m["stats"]["extra"].get("train_tokens") and not m["stats"]["extra"].get("val_tokens"):
            continue
        else:
            versions[s] = m["key"]
    if missing or stale:
        raise PretrainError(f"token shards not ready: missing {missing}, encoded with an older tokenizer {stale}; "
                            "materialize token_shards for them first")
    if not versions:
        raise PretrainError("no token shards to train on")
    return current, versions, tok["stats"]["extra"]["vocab_size"]


def recipe_of(train: dict[str, Any]) -> dict[str, Any]:
    """The fields of `train.*` a run and its continuations share, JSON-normalised (tuples
    are lists) so that a recipe read back from run.json compares equal."""
    keep = set(recipe_fields(TrainConfig))
    if not train.get("mixture"):  # no mixture: the key of a run from before mixtures existed
        keep.discard("mixture")
    return json.loads(json.dumps({k: v for k, v in train.items() if k in keep}))


@dataclass
class Start:
    """Where a run starts: from scratch (continued_from None) or from a previous run's
    final checkpoint (run_key, checkpoint, step, weights_sha256)."""
    reason: str
    new_shards: list[str]
    old_shards: list[str] = field(default_factory=list)
    continued_from: dict[str, Any] | None = None
    in_root: bool = False  # the checkpoint is the run on disk's own: it moves with the archive


def enough_validation(store: DataStore, versions: dict[str, str], cfg: YunqueConfig) -> None:
    """Refuse a run whose validation split cannot fill one batch: it would have no
    validation loss, no early stopping and no perplexity, silently. The split is by
    document (a hash of its id), so a small corpus can have few or no validation
    documents; the message says how much text is missing and what would do."""
    # torch: loaded when a run is prepared, not when the code location imports this module
    from model.pretrain.data import validation_windows

    t = cfg.train
    val = {s: store.manifest(TOKEN_SHARDS, s)["stats"]["extra"] for s in versions}
    windows = sum(validation_windows(x.get("val_tokens", 0), t.seq_len) for x in val.values())
    if windows >= t.batch_size:
        return
    tokens = sum(x.get("val_tokens", 0) for x in val.values())
    docs = sum(x.get("val_documents", 0) for x in val.values())
    total = tokens + sum(x.get("train_tokens", 0) for x in val.values())
    need = t.batch_size * t.seq_len + t.seq_len * len(val)  # a window's start must leave seq_len + 1 tokens
    f = cfg.tokenizer.val_fraction
    hint = min(0.5, round(f * 1.5 * need / max(tokens, 1), 2)) if tokens else min(0.5, round(1.5 * need / total, 2))
    raise PretrainError(
        f"the validation split holds {tokens:,} tokens in {docs} documents over {len(val)} shards: {windows} windows "
        f"of train.seq_len + 1 = {t.seq_len + 1} tokens, and one validation batch needs train.batch_size = "
        f"{t.batch_size} (about {max(need - tokens, 0):,} tokens more). Raise tokenizer.val_fraction (now {f}; about "
        f"{max(hint, f + 0.01)} would do), lower train.batch_size or train.seq_len, or add text")


def downstream_pairs(store: DataStore, root: Path, language: str = "es") -> str:
    """The held-out domain QA pairs the evaluations during training score: the ones
    eval_report scores (eval_contamination's clean choice, else the first held-out ones),
    their questions in the corpus' language (none without its qa.toml), written beside the run."""
    return str(write_jsonl(eval_pairs(store, language), root / DOWNSTREAM_FILE))


def prepare(store: DataStore, shards: list[str], cfg: YunqueConfig, asset: str = BASE_MODEL) -> RunSpec:
    tok_hash, encoded, vocab = token_inputs(store, shards)
    enough_validation(store, encoded, cfg)
    try:  # the eval_contamination verdict: refuse a contaminated split, train on a purified one
        versions, shard_dir, decontamination = training_shards(store, encoded)
    except DecontaminationError as e:
        raise PretrainError(str(e)) from e
    try:  # train.mixture (part of the recipe, so of the key) against these shards, before anything is written
        by_source = mixture.groups(cfg.train, shards, versions)
    except mixture.MixtureError as e:
        raise PretrainError(str(e)) from e
    model = json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(cfg.model, vocab_size=vocab))))
    recipe = recipe_of(dataclasses.asdict(cfg.train))
    # a fresh run's key, as before continuation existed: runs on disk keep theirs
    data_key = cache_key(asset, CODE_VERSION, recipe, model, tok_hash, versions)
    root = store.dir(asset)
    root.mkdir(parents=True, exist_ok=True)
    prev = json.loads((root / RUN_FILE).read_text()) if (root / RUN_FILE).exists() else {}
    start = choose_start(root, prev, data_key, recipe, model, tok_hash, versions, cfg.train)
    t, cont = cfg.train, start.continued_from
    key = data_key if cont is None else cache_key(data_key, {
        "from": {k: cont[k] for k in ("run_key", "step", "weights_sha256")}, "steps": t.continuation_steps(),
        "replay_fraction": t.replay_fraction, "new": start.new_shards, "old": start.old_shards})
    moved_to = archive_if_changed(root, key)
    if cont is not None and start.in_root:  # its checkpoint now lives in the archive
        assert moved_to is not None
        cont["checkpoint"] = str(moved_to / Path(cont["checkpoint"]).name)
    # the tree's own sections, with this run's paths and continuation filled in: the
    # program's one typed input (train_config.json), the same types the tree has
    filled = {"shards": [shard_dir[s] for s in sorted(versions)], "out": str(root),
              "tokenizer": str(store.verified(TOKENIZER)), "init_from": "", "start_step": 0, "replay_shards": [],
              "downstream_qa": downstream_pairs(store, root, cfg.language) if t.downstream_every else "",
              "mixture_shards": [[shard_dir[s] for s in g] for g in by_source or []]}
    if cont is not None:
        filled |= {"init_from": cont["checkpoint"], "start_step": cont["step"],
                   "steps": cont["step"] + t.continuation_steps(), "replay_shards": [shard_dir[s] for s in start.old_shards]}
    if store.remote is not None:  # checkpoints go to the store as they are written (model.checkpoint.mirror)
        filled["checkpoint_mirror"] = store.remote_url(asset)
    run = PretrainRun(dataclasses.replace(t, **filled), dataclasses.replace(cfg.model, vocab_size=vocab))
    lineage = {"tokenizer_hash": tok_hash, "token_shards": versions, "decontamination": decontamination,
               "start": start.reason, "continued_from": cont,
               "new_shards": start.new_shards, "old_shards": start.old_shards,
               "replay_fraction": t.replay_fraction if cont is not None else None,
               "sources": mixture.sources(store, t, start.new_shards, start.old_shards, cont is not None, by_source),
               "steps": [run.train.start_step, run.train.steps]}
    spec = RunSpec(asset, root, key, json.loads(json.dumps(run.to_json())), lineage)
    write_json(spec.config_path, spec.config)
    rec = spec.record() | {"key": key, "data_key": data_key, "recipe": recipe, "config": spec.config,
                           "lineage": lineage,
                           "estimate": cost.estimate(cfg, run.model, run.train.steps - run.train.start_step)}
    write_json(root / RUN_FILE, rec)
    store.publish(asset)  # another node, or a resume on another machine, starts from these
    return spec


def choose_start(root: Path, prev: dict[str, Any], data_key: str, recipe: dict, model: dict, tok_hash: str,
                 versions: dict[str, str], t: TrainConfig) -> Start:
    """Continue the run on disk (`prev`, its run.json), or start from scratch, and why."""
    everything = sorted(versions)
    lineage = prev.get("lineage", {})
    if prev and prev.get("data_key", prev.get("key")) == data_key:
        # The same shards and recipe as the run on disk: it is this run (or this run with
        # other continuation settings), started the way it was started.
        cont = lineage.get("continued_from")
        if cont is None:
            return Start(lineage.get("start", "fresh"), everything)
        if not t.continue_from_previous:
            return Start("fresh: train.continue_from_previous is off", everything)
        if not Path(cont["checkpoint"]).is_dir() and not all_checkpoints(root):
            return Start(f"fresh: the checkpoint to continue from is gone ({cont['checkpoint']})", everything)
        return Start(lineage["start"], lineage["new_shards"], lineage["old_shards"], dict(cont))
    if not prev:
        return Start("fresh: no previous run", everything)
    if not t.continue_from_previous:
        return Start("fresh: train.continue_from_previous is off", everything)
    why = _changed(prev, recipe, model, tok_hash, versions)
    if why:
        return Start(f"fresh: {why}", everything)
    want = prev["config"]["train"]["steps"]
    end = ended(root, want, None)  # verifies checksums: the weights must be the ones recorded
    if end is None:
        final = latest(root)
        return Start(f"fresh: the previous run is incomplete (step {final.step if final else 0} of {want})",
                     everything)
    # a finished run goes on from its last step; an early-stopped one from its best (it had stopped improving)
    final = end.recorded if end.early_stop else end.last
    seen = lineage.get("token_shards", {})
    new = sorted(s for s in versions if seen.get(s) != versions[s])
    old = sorted(s for s in versions if seen.get(s) == versions[s])
    cont = {"run_key": prev["key"], "checkpoint": str(final.path), "step": final.step,
            "weights_sha256": weights_sha256(final.path)}
    return Start(f"continued: new or changed shards {new}", new, old, cont, in_root=True)


def _changed(prev: dict[str, Any], recipe: dict, model: dict, tok_hash: str, versions: dict[str, str]) -> str:
    """Why the run on disk cannot be continued ("" if it can, as far as inputs go)."""
    if prev.get("lineage", {}).get("tokenizer_hash") != tok_hash:
        return "tokenizer changed"
    old_model = prev.get("config", {}).get("model", {})
    if old_model != model:
        return f"model config changed ({', '.join(_diff(old_model, model, 'model'))})"
    old_recipe = prev.get("recipe") or recipe_of(prev.get("config", {}).get("train", {}))
    if old_recipe != recipe:
        return f"recipe changed ({', '.join(_diff(old_recipe, recipe, 'train'))})"
    gone = sorted(set(prev.get("lineage", {}).get("token_shards", {})) - set(versions))
    if gone:  # a vanished shard's documents must not keep training the model
        return f"shards removed since the previous run {gone}"
    return ""


def _diff(a: dict, b: dict, section: str) -> list[str]:
    return [f"{section}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


