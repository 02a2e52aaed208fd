"""The pretraining program's data side and step arithmetic: validation over every rank,
the corpus' token counts, the loader (all shards alike, or a continued run's new and
replayed shards, or a mixture's sources) and the learning rate at a step. Split from
model/pretrain/train.py, which runs the loop."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from model.core import parallel
from model.core.config import TrainConfig
from model.core.precision import autocast
from model.core.schedule import lr_at
from model.pretrain import mixture
from model.pretrain.data import (
    MixtureWindows,
    Source,
    TokenWindows,
    validation_batches,
    validation_bytes_per_token,
)
from pipelines.tokens.token_format import TokenShard


def evaluate(model: torch.nn.Module, cfg: TrainConfig, d: parallel.Dist) -> dict:
    bytes_per_token = validation_bytes_per_token(cfg.shards, cfg.seq_len, cfg.batch_size, world_size=d.world,
                                                 max_batches=cfg.eval_batches * d.world)
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=d.device)
    with torch.no_grad():
        for x, y in validation_batches(cfg.shards, cfg.seq_len, cfg.batch_size, rank=d.rank, world_size=d.world,
                                       max_batches=cfg.eval_batches * d.world):
            with autocast(cfg.dtype, d.device):
                _, loss = model(x.to(d.device), y.to(d.device))
            total += torch.tensor([loss.item() * y.numel(), y.numel()], dtype=torch.float64, device=d.device)
    if d.world > 1:
        dist.all_reduce(total)
    model.train()
    if total[1] == 0:
        return {}
    loss = (total[0] / total[1]).item()
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50)),
            "val_bpb": loss / math.log(2) / bytes_per_token if bytes_per_token else None}


@dataclass
class Corpus:
    train_tokens: int
    val_tokens: int

    @classmethod
    def read(cls, shards: list[str]) -> Corpus:
        splits = [TokenShard.open(s).header["splits"] for s in shards]
        return cls(sum(s["train"]["tokens"] for s in splits), sum(s["val"]["tokens"] for s in splits))


def loader_sources(cfg: TrainConfig) -> list[Source] | None:
    """None (every shard alike) for a fresh run; for a continued one, the shards the previous
    run did not see (weight 1 - replay_fraction) and a replay of those it did; with
    `train.mixture`, its sources (within each of those parts: model.pretrain.mixture)."""
    if not cfg.init_from and not cfg.mixture:
        return None
    old = set(cfg.replay_shards)
    if cfg.mixture:
        groups = cfg.mixture_shards or mixture.assign(cfg.mixture, cfg.shards)
        parts = mixture.sources(cfg.mixture, groups, old if cfg.init_from else None, cfg.replay_fraction)
        return [Source(n, paths, w) for n, paths, w in parts]
    groups = [Source("new", [s for s in cfg.shards if s not in old], 1 - cfg.replay_fraction),
              Source("replay", [s for s in cfg.shards if s in old], cfg.replay_fraction)]
    return [g for g in groups if g.paths]


def make_loader(cfg: TrainConfig, d: parallel.Dist) -> TokenWindows | MixtureWindows:
    sources = loader_sources(cfg)
    if sources is None:
        return TokenWindows(cfg.shards, cfg.seq_len, cfg.batch_size, rank=d.rank, world_size=d.world, seed=cfg.seed)
    # the start step in the seed: a continuation of a continuation must not replay the same order
    return MixtureWindows(sources, cfg.seq_len, cfg.batch_size, rank=d.rank, world_size=d.world,
                          seed=[cfg.seed, cfg.start_step])


def lr_for(cfg: TrainConfig, step: int) -> float:
    """Warmup and decay over this run's own steps, start_step..steps. A continued run
    re-warms (its moments are fresh and the data has shifted) over a short warmup, at most
    a tenth of its steps, then decays to min_lr again at its last step."""
    span = cfg.steps - cfg.start_step
    warmup = min(cfg.warmup, span // 10) if cfg.init_from else cfg.warmup
    return lr_at(step - cfg.start_step, lr=cfg.lr, min_lr=cfg.min_lr, warmup=warmup, total=span, kind=cfg.schedule)
