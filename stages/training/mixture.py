"""The source groups a pretraining run reads, resolved before launch (no torch, no Dagster):
`train.mixture`'s sources matched against the run's token shards (model.pretrain.mixture: every
shard in one source, every pattern matching one), with the training tokens each holds on
disk; without a mixture, every shard alike ("all"), or for a continued run the new shards
and a replay of the old ("new", "replay")."""

from __future__ import annotations

from typing import Any

from model.core.config import TrainConfig
from model.pretrain.mixture import MixtureError, assign
from model.pretrain.mixture import sources as mixture_sources
from stages.asset_names import TOKEN_SHARDS
from stages.store.outputs import DataStore

__all__ = ["MixtureError", "groups", "sources"]


def groups(train: TrainConfig, shards: list[str], versions: dict[str, str]) -> list[list[str]] | None:
    """Each mixture source's shards that hold tokens (`versions`: stages.training.pretrain.token_inputs),
    in mixture order; None without a mixture. Patterns are matched against every shard the
    run was given, so a pattern naming only an empty shard is not a typo; a source left with
    no tokens but a weight is refused."""
    if not train.mixture:
        return None
    out = [[s for s in g if s in versions] for g in assign(train.mixture, shards)]
    for src, g in zip(train.mixture, out):
        if src.weight > 0 and not g:
            raise MixtureError(f"train.mixture source {src.name!r} has weight {src.weight} but no training tokens: "
                               f"its shards are empty")
    return out


def sources(store: DataStore, train: TrainConfig, new: list[str], old: list[str], continued: bool,
            by_source: list[list[str]] | None) -> list[dict[str, Any]]:
    """The groups a run reads: name, shards, share of windows, training tokens on disk
    (the names the training program's tokens_per_source uses)."""
    def tokens(shards: list[str]) -> int:
        return sum(store.manifest(TOKEN_SHARDS, s)["stats"]["extra"].get("train_tokens", 0) for s in shards)

    if by_source is not None:
        parts = mixture_sources(train.mixture, by_source, set(old) if continued else None, train.replay_fraction)
    elif not continued:
        parts = [("all", new, 1.0)]
    else:
        new_weight = 1.0 - train.replay_fraction if old else 1.0  # nothing to replay: every shard changed
        parts = [("new", new, new_weight), ("replay", old, 1.0 - new_weight)]
    return [{"name": n, "shards": s, "weight": round(w, 6), "train_tokens": tokens(s)} for n, s, w in parts if s]
