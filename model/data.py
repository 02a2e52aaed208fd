"""The pretraining data loader: random fixed-length windows over memory-mapped token
shards, split across DDP ranks without overlap, resumable exactly.

Each epoch cuts every shard into non-overlapping windows of `seq_len + 1` tokens, starting
at a random offset (so window boundaries move between epochs), and shuffles the windows of
all shards together with a generator seeded by (seed, epoch). Global step s takes
windows [s*G, (s+1)*G) of that order, G = batch_size * world_size, and rank r takes its
contiguous slice of B. The whole state is therefore (epoch, cursor): no RNG object needs
pickling, a checkpoint stores a few integers, and one process with batch 2B sees exactly
the windows two processes with batch B see together.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
        self._order: tuple[int, np.ndarray, np.ndarray, int] | None = None  # epoch, permutation, bounds, shift
        total = sum(len(a) for a in self.arrays)
        # The random shift of an epoch can cost each shard a window: with the largest
        # shift there must still be one full step, or some epoch would come up short.
        fewest = sum(max(0, (len(a) - seq_len) // seq_len) for a in self.arrays)
        if fewest < self.global_batch:
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

    def _epoch_windows(self, epoch: int) -> tuple[np.random.Generator, np.ndarray, int]:
        rng = np.random.default_rng([self.seed, epoch])
        shift = int(rng.integers(self.seq_len))
        counts = np.array([max(0, (len(a) - shift - 1) // self.seq_len) for a in self.arrays], np.int64)
        return rng, np.concatenate([[0], np.cumsum(counts)]), shift

    def _order_for(self, epoch: int) -> tuple[np.ndarray, np.ndarray, int]:
        if self._order is None or self._order[0] != epoch:
            rng, bounds, shift = self._epoch_windows(epoch)
            self._order = (epoch, rng.permutation(int(bounds[-1])), bounds, shift)
        return self._order[1], self._order[2], self._order[3]

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by one."""
        perm, bounds, shift = self._order_for(self.epoch)
        if self.cursor + self.global_batch > len(perm):  # the remainder is dropped, like drop_last
            self.epoch, self.cursor = self.epoch + 1, 0
            perm, bounds, shift = self._order_for(self.epoch)
        lo = self.cursor + self.rank * self.batch_size
        windows = perm[lo:lo + self.batch_size]
        assert len(windows) == self.batch_size, "epoch shorter than one step"  # excluded in __init__
        self.cursor += self.global_batch
        shard = np.searchsorted(bounds, windows, side="right") - 1
        starts = shift + (windows - bounds[shard]) * self.seq_len
        out = np.empty((self.batch_size, self.seq_len + 1), np.int64)
        for i, (s, start) in enumerate(zip(shard, starts)):
            out[i] = self.arrays[s][start:start + self.seq_len + 1]
        t = torch.from_numpy(out)
        return t[:, :-1], t[:, 1:]

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
        mine = self.state_dict()
        for k in ("seed", "seq_len", "split", "shards", "tokens", "tokenizer_hash"):
            if state.get(k) != mine[k]:
                raise LoaderStateError(f"cannot resume: checkpoint's loader {k}={state.get(k)!r}, "
                                       f"this run's {mine[k]!r}")
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


def _validation_windows(tokens: int, seq_len: int) -> int:
    return len(range(0, tokens - seq_len, seq_len))


def validation_bytes_per_token(paths: Sequence[str | Path], seq_len: int, batch_size: int, *,
                               world_size: int = 1, max_batches: int | None = None) -> float:
    """Text bytes per token of exactly the windows validation_batches(...) evaluates, for
    bits per byte. Windows come shard by shard, so a capped evaluation may cover only the
    first shards: each shard's own ratio is weighted by the windows used from it (a
    corpus-wide ratio would mis-state bits per byte when shards compress differently)."""
    splits = [TokenShard.open(p).header["splits"]["val"] for p in paths]
    counts = [_validation_windows(s["tokens"], seq_len) for s in splits]
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
