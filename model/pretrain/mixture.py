"""Data mixtures as configuration (`train.mixture`): which shards each named source holds,
and the (name, shards, weight) groups the loader (model.pretrain.data.MixtureWindows) reads.

A source names its shards by name or fnmatch pattern, and its weight is its share of the
training windows relative to the others (so up- or down-sampled). Every shard is in exactly
one source: a shard no source names, a shard two sources name and a pattern that matches
nothing are errors, since a mixture states proportions. A continued run keeps its new /
replay split and applies the weights within each part. Torch-free, so that the stage
resolves names before launch. docs/pretraining.md#data-mixtures.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fnmatch import fnmatchcase

from model.core.config import MixtureSource


class MixtureError(ValueError):
    pass


def _name(shard: str) -> str:
    return os.path.basename(os.path.normpath(shard))


def assign(mixture: Sequence[MixtureSource], shards: Sequence[str]) -> list[list[str]]:
    """The shards (names or directories) of each source, in mixture order; a MixtureError
    for a pattern that matches nothing, a shard in two sources or a shard in none."""
    names = sorted(_name(s) for s in shards)
    groups: list[list[str]] = []
    owner: dict[str, list[str]] = {}
    for src in mixture:
        for pattern in src.shards:
            if not any(fnmatchcase(n, pattern) for n in names):
                raise MixtureError(f"train.mixture source {src.name!r}: {pattern!r} matches no shard; "
                                   f"the shards are {names}")
        mine = [s for s in shards if any(fnmatchcase(_name(s), p) for p in src.shards)]
        groups.append(sorted(mine, key=_name))
        for s in mine:
            owner.setdefault(_name(s), []).append(src.name)
    if twice := {n: o for n, o in sorted(owner.items()) if len(o) > 1}:
        raise MixtureError(f"train.mixture: a shard may be in one source only; {twice}")
    if missing := [n for n in names if n not in owner]:
        raise MixtureError(f"train.mixture: shards {missing} are in no source; name them (or a pattern that "
                           "matches them) in one source, with weight 0 to leave them out")
    return groups


def sources(mixture: Sequence[MixtureSource], groups: Sequence[Sequence[str]], replay: set[str] | None = None,
            replay_fraction: float = 0.0) -> list[tuple[str, list[str], float]]:
    """(name, shards, weight) of each group the loader reads, weights summing to 1.
    `replay`: a continued run's old shards (None: a fresh run). A source with no shards in a
    part, or with weight 0, is left out of it (weight 0: never read); a part with no weight at
    all gives its share to the other."""
    parts = [("", [list(g) for g in groups], 1.0)] if replay is None else [
        ("new/", [[s for s in g if s not in replay] for g in groups], 1.0 - replay_fraction),
        ("replay/", [[s for s in g if s in replay] for g in groups], replay_fraction)]
    out = []
    for prefix, part, share in parts:
        present = [(src, g) for src, g in zip(mixture, part) if g and src.weight > 0]
        total = sum(src.weight for src, _ in present)
        if total > 0 and share > 0:
            out += [(prefix + src.name, g, share * src.weight / total) for src, g in present]
    norm = sum(w for _, _, w in out)
    if norm <= 0:
        raise MixtureError("train.mixture: every source with shards has weight 0; nothing to train on")
    return [(n, g, w / norm) for n, g, w in out]
