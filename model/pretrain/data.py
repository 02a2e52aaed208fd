"""The pretraining data loader: random fixed-length windows over memory-mapped token
shards, split across DDP ranks without overlap, resumable exactly.

Each epoch cuts every shard into windows of `seq_len + 1` tokens from a random offset and
shuffles them all with a generator seeded by (seed, epoch); step s takes the next
batch_size * world_size windows and each rank its contiguous slice. So the whole state is
(epoch, cursor), and one process with batch 2B sees exactly the windows two processes with
batch B see. `MixtureWindows` draws groups of shards in fixed proportions, each group with
its own order (`train.mixture`, model/pretrain/mixture.py). docs/tokenizer.md#the-pretraining-loader.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipelines.tokens.token_format import TokenShard, TokenShardError


class LoaderStateError(ValueError):
    pass


def open_shards(paths: Sequence[str | Path]) -> list[TokenShard]:
    """Token shards in name order, refusing a mix of tokenizers."""
    shards = sorted((TokenShard.open(p) for p in paths), key=lambda s: s.path.name)
    if not shards:
        raise TokenShardError("no token shards given")
    hashes = {s.tokenizer_hash for s in shards}
    if len(hashes) > 1:
        by = {s.path.name: s.tokenizer_hash for s in shards}
        raise TokenShardError(f"token shards were encoded with different tokenizers {by}; "
                              "re-materialize token_shards after the tokenizer")
    return shards


class _Epochs:
    """The windows of some shards, epoch by epoch: epoch e cuts every shard at a random
    shift and permutes all windows, from a generator seeded by (*seed, e). Pure functions
    of the epoch, cached (two epochs: a mixture's step may straddle a boundary)."""

    def __init__(self, arrays: list[np.ndarray], seq_len: int, seed: list[int]):
        self.arrays, self.seq_len, self.seed = arrays, seq_len, seed
        self._cache: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}

    def fewest(self) -> int:
        """Windows of the worst epoch: the largest shift can cost each shard one."""
        return sum(max(0, (len(a) - self.seq_len) // self.seq_len) for a in self.arrays)

    def order(self, epoch: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(permutation of the epoch's windows, window bounds per shard, shift)."""
        if epoch not in self._cache:
            rng = np.random.default_rng([*self.seed, epoch])
            shift = int(rng.integers(self.seq_len))
            counts = np.array([max(0, (len(a) - shift - 1) // self.seq_len) for a in self.arrays], np.int64)
            bounds = np.concatenate([[0], np.cumsum(counts)])
            self._cache = {e: v for e, v in self._cache.items() if e == epoch - 1}
            self._cache[epoch] = (rng.permutation(int(bounds[-1])), bounds, shift)
        return self._cache[epoch]

    def rows(self, epoch: int, windows: np.ndarray, out: np.ndarray) -> None:
        """Write the tokens of `windows` (indices into the epoch's windows) into `out`."""
        _, bounds, shift = self.order(epoch)
        shard = np.searchsorted(bounds, windows, side="right") - 1
        starts = shift + (windows - bounds[shard]) * self.seq_len
        for i, (s, start) in enumerate(zip(shard, starts)):
            out[i] = self.arrays[s][start:start + self.seq_len + 1]


def _as_batch(out: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.from_numpy(out)
    return t[:, :-1], t[:, 1:]


class TokenWindows:
    def __init__(self, paths: Sequence[str | Path], seq_len: int, batch_size: int, *, split: str = "train",
                 rank: int = 0, world_size: int = 1, seed: int = 0):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        self.shards = open_shards(paths)
        self.arrays = [s.split(split).tokens for s in self.shards]
        self.seq_len, self.batch_size, self.rank, self.world_size, self.seed = seq_len, batch_size, rank, world_size, seed
        self.split = split
        self.epoch, self.cursor = 0, 0
        self._epochs = _Epochs(self.arrays, seq_len, [seed])
        total = sum(len(a) for a in self.arrays)
        # With the largest shift there must still be one full step, or some epoch would come up short.
        if self._epochs.fewest() < self.global_batch:
            raise TokenShardError(
                f"{split} split has {total} tokens: fewer than one step of {self.global_batch} windows of "
                f"{seq_len + 1} tokens (batch {batch_size} x {world_size} ranks); lower the sequence length "
                "or the batch, or add data")

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @property
    def tokenizer_hash(self) -> str:
        return self.shards[0].tokenizer_hash

    def _order_for(self, epoch: int) -> tuple[np.ndarray, np.ndarray, int]:
        return self._epochs.order(epoch)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by one."""
        perm = self._epochs.order(self.epoch)[0]
        if self.cursor + self.global_batch > len(perm):  # the remainder is dropped, like drop_last
            self.epoch, self.cursor = self.epoch + 1, 0
            perm = self._epochs.order(self.epoch)[0]
        lo = self.cursor + self.rank * self.batch_size
        windows = perm[lo:lo + self.batch_size]
        assert len(windows) == self.batch_size, "epoch shorter than one step"  # excluded in __init__
        self.cursor += self.global_batch
        out = np.empty((self.batch_size, self.seq_len + 1), np.int64)
        self._epochs.rows(self.epoch, windows, out)
        return _as_batch(out)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        """Plain ints and strings: safe to store in a checkpoint loaded with weights_only."""
        # token counts too: a shard re-encoded (say, after dedup changed) under the same
        # name and tokenizer would silently give other batches
        return {"epoch": self.epoch, "cursor": self.cursor, "seed": self.seed, "seq_len": self.seq_len,
                "split": self.split, "shards": [s.path.name for s in self.shards],
                "tokens": [len(a) for a in self.arrays], "tokenizer_hash": self.tokenizer_hash}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` left off. The world size may differ (the cursor counts
        global windows), but the data and the window shape may not."""
        _check_same(state, self.state_dict(), ("seed", "seq_len", "split", "shards", "tokens", "tokenizer_hash"))
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


def _check_same(state: dict, mine: dict, keys: Sequence[str]) -> None:
    for k in keys:
        if state.get(k) != mine[k]:
            raise LoaderStateError(f"cannot resume: checkpoint's loader {k}={state.get(k)!r}, this run's {mine[k]!r}")


@dataclass
class Source:
    """A group of shards and its share of the training windows."""
    name: str
    paths: Sequence[str | Path]
    weight: float


def source_tokens(sources: Sequence[Source]) -> list[dict]:
    """Per source: its name, share of the windows (normalised) and the training tokens its
    shards hold (from their headers: nothing is mapped), for the preflight plan."""
    total = sum(s.weight for s in sources)
    return [{"name": s.name, "weight": s.weight / total if total else 0.0,
             "train_tokens": sum(int(TokenShard.open(p).header["splits"]["train"]["tokens"]) for p in s.paths)}
            for s in sources]


class MixtureWindows:
    """Windows from groups of shards in fixed proportions, resumable exactly, split
    across ranks without overlap like TokenWindows.

    Global window slot k (step s holds slots [s*G, (s+1)*G)) is given to a group
    stratified rather than by independent draws: the first K slots hold
    round(K * C_g) - round(K * C_(g-1)) windows of group g (C the cumulative normalised
    weights), so every step has its share within one window and the proportions never
    drift; a permutation seeded by (seed, first slot of the step) spreads the groups over
    the step's slots, hence over the ranks. Each group keeps its own epochs
    (TokenWindows' order) and is read in global order; an epoch may end inside a step
    and the next begin (a small group could never fill a step otherwise). Everything is
    a function of the global slot, so the state is the slots consumed plus (epoch,
    cursor) per group, and one process with batch 2B sees what two with batch B see."""

    def __init__(self, sources: Sequence[Source], seq_len: int, batch_size: int, *, split: str = "train",
                 rank: int = 0, world_size: int = 1, seed: int | Sequence[int] = 0):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of {world_size}")
        weights = np.array([s.weight for s in sources], np.float64)
        if not sources or (weights < 0).any() or weights.sum() <= 0:
            raise ValueError(f"a mixture needs sources with non-negative weights that sum above 0, got {weights}")
        if any(not s.paths for s in sources) or len({s.name for s in sources}) < len(sources):
            raise ValueError("every source of a mixture needs a unique name and at least one shard")
        open_shards([p for s in sources for p in s.paths])  # one tokenizer across all groups
        self.seed = [int(seed)] if isinstance(seed, int) else [int(x) for x in seed]
        self.names = [s.name for s in sources]
        self.shards = [open_shards(s.paths) for s in sources]
        names = [sh.path.name for group in self.shards for sh in group]
        if len(set(names)) < len(names):
            raise ValueError(f"a shard is in two sources of the mixture: {sorted(names)}")
        self.weights = weights / weights.sum()
        self._cum = np.cumsum(self.weights)
        self._cum[-1] = 1.0  # rounding must not leave the last slot of a step without a group
        self.seq_len, self.batch_size, self.split = seq_len, batch_size, split
        self.rank, self.world_size = rank, world_size
        self._epochs = [_Epochs([sh.split(split).tokens for sh in group], seq_len, [*self.seed, g + 1])
                        for g, group in enumerate(self.shards)]
        for name, w, ep in zip(self.names, self.weights, self._epochs):
            if w > 0 and ep.fewest() < 1:
                raise TokenShardError(f"source {name!r}: its {split} split has less than one window of "
                                      f"{seq_len + 1} tokens; lower the sequence length or add data")
        self.slots, self.epoch, self.cursor = 0, [0] * len(sources), [0] * len(sources)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def windows_per_source(self, slots: int | None = None) -> dict[str, int]:
        """Windows each group has given over the first `slots` global slots (default: so far)."""
        k = self.slots if slots is None else slots
        bounds = np.floor(k * self._cum + 0.5).astype(np.int64)
        return dict(zip(self.names, np.diff(bounds, prepend=0).tolist()))

    def _take(self, g: int, n: int) -> list[tuple[int, int]]:
        """The next n windows of group g in its global order, as (epoch, window)."""
        out: list[tuple[int, int]] = []
        while n > 0:
            perm = self._epochs[g].order(self.epoch[g])[0]
            if self.cursor[g] >= len(perm):
                self.epoch[g], self.cursor[g] = self.epoch[g] + 1, 0
                continue
            k = min(n, len(perm) - self.cursor[g])
            out += [(self.epoch[g], int(w)) for w in perm[self.cursor[g]:self.cursor[g] + k]]
            self.cursor[g] += k
            n -= k
        return out

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by one."""
        before, after = self.windows_per_source(), self.windows_per_source(self.slots + self.global_batch)
        counts = [after[n] - before[n] for n in self.names]
        owner = np.random.default_rng([*self.seed, self.slots]).permutation(np.repeat(np.arange(len(counts)), counts))
        taken = [self._take(g, c) for g, c in enumerate(counts)]  # every rank advances every group alike
        self.slots += self.global_batch
        used = [0] * len(counts)
        out = np.empty((self.batch_size, self.seq_len + 1), np.int64)
        lo = self.rank * self.batch_size
        for j, g in enumerate(owner[:lo + self.batch_size]):
            if j >= lo:
                epoch, window = taken[g][used[g]]
                self._epochs[g].rows(epoch, np.array([window]), out[j - lo:j - lo + 1])
            used[g] += 1
        return _as_batch(out)

    def _identity(self) -> dict:
        return {"seed": self.seed, "seq_len": self.seq_len, "split": self.split,
                "tokenizer_hash": self.shards[0][0].tokenizer_hash,
                "sources": [{"name": n, "weight": float(w), "shards": [s.path.name for s in group],
                             "tokens": [len(a) for a in ep.arrays]}
                            for n, w, group, ep in zip(self.names, self.weights, self.shards, self._epochs)]}

    def state_dict(self) -> dict:
        """Plain ints and strings: safe to store in a checkpoint loaded with weights_only."""
        return {**self._identity(), "slots": self.slots, "epoch": list(self.epoch), "cursor": list(self.cursor)}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` left off; the world size may differ (slots are global)."""
        mine = self._identity()
        _check_same(state, mine, tuple(mine))
        self.slots = int(state["slots"])
        self.epoch, self.cursor = [int(e) for e in state["epoch"]], [int(c) for c in state["cursor"]]


def validation_windows(tokens: int, seq_len: int) -> int:
    """Validation windows (seq_len + 1 tokens, non-overlapping starts) in a split of `tokens`."""
    return len(range(0, tokens - seq_len, seq_len))


def validation_bytes_per_token(paths: Sequence[str | Path], seq_len: int, batch_size: int, *,
                               world_size: int = 1, max_batches: int | None = None) -> float:
    """Text bytes per token of exactly the windows validation_batches(...) evaluates, for
    bits per byte. Windows come shard by shard, so a capped evaluation may cover only the
    first shards: each shard's own ratio is weighted by the windows used from it (a
    corpus-wide ratio would mis-state bits per byte when shards compress differently)."""
    splits = [TokenShard.open(p).header["splits"]["val"] for p in paths]
    counts = [validation_windows(s["tokens"], seq_len) for s in splits]
    n_batches = sum(counts) // batch_size
    if max_batches is not None:
        n_batches = min(n_batches, max_batches)
    remaining = (n_batches - n_batches % world_size) * batch_size
    weighted = used_total = 0.0
    for split, count in zip(splits, counts):
        used = min(count, remaining)
        remaining -= used
        if used:
            weighted += used * split["bytes"] / split["tokens"]
            used_total += used
    return weighted / used_total if used_total else 0.0


def validation_batches(paths: Sequence[str | Path], seq_len: int, batch_size: int, *, rank: int = 0,
                       world_size: int = 1, max_batches: int | None = None
                       ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every non-overlapping window of the validation split, in order, batches dealt to
    ranks round-robin (so the union over ranks is each window once). Every rank gets the
    same number of batches (the last partial round is dropped), so per-batch collectives
    in DDP evaluation cannot hang."""
    shards = open_shards(paths)
    windows = [(a, start) for a in (s.split("val").tokens for s in shards)
               for start in range(0, len(a) - seq_len, seq_len)]  # _validation_windows per shard
    n_batches = len(windows) // batch_size
    if max_batches is not None:
        n_batches = min(n_batches, max_batches)
    n_batches -= n_batches % world_size
    for b in range(rank, n_batches, world_size):
        chunk = windows[b * batch_size:(b + 1) * batch_size]
        out = np.stack([a[s:s + seq_len + 1] for a, s in chunk]).astype(np.int64)
        t = torch.from_numpy(out)
        yield t[:, :-1], t[:, 1:]
