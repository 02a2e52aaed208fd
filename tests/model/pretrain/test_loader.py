"""The pretraining loader: exact resume, DDP ranks without overlap, validation windows,
and the mixture of new and replayed shards that continued pretraining reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from model.pretrain.data import (
    LoaderStateError,
    MixtureWindows,
    Source,
    TokenWindows,
    validation_batches,
    validation_bytes_per_token,
)
from pipelines.tokens.token_format import FORMAT, HEADER, SplitWriter, TokenShardError


def _shard(root, name: str, lengths: list[int], start: int, tok_hash: str = "h1", bytes_per_token: float = 0.0):
    """A token shard whose tokens are consecutive integers from `start`, so every window
    is identified by its first token."""
    d = root / name
    d.mkdir(parents=True)
    splits = {}
    value = start
    for split, lens in (("train", lengths), ("val", lengths[:2])):
        w = SplitWriter(d, split, np.dtype("<u4"), eot_id=0)
        docs = []
        for n in lens:
            docs.append(list(range(value, value + n)))
            value += n + 1
        w.add(docs, 0)
        splits[split] = w.close()
        splits[split]["bytes"] = round(bytes_per_token * splits[split]["tokens"])
    (d / HEADER).write_text(json.dumps({"format": FORMAT, "dtype": "<u4", "vocab_size": 2**20, "eot_id": 0,
                                        "tokenizer_hash": tok_hash, "shard": name, "splits": splits}))
    return d


@pytest.fixture()
def shards(tmp_path):
    return [_shard(tmp_path, "a", [300, 50, 700], 1), _shard(tmp_path, "b", [1200], 100_000),
            _shard(tmp_path, "c", [90, 410, 333], 200_000)]


def _run(loader: TokenWindows, steps: int) -> list[torch.Tensor]:
    return [loader.next_batch()[0].clone() for _ in range(steps)]


def test_targets_are_inputs_shifted_by_one(shards):
    x, y = TokenWindows(shards, seq_len=32, batch_size=4).next_batch()
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_resume_sees_exactly_the_batches_of_an_uninterrupted_run(shards):
    # 3,000-odd tokens / 32 = ~100 windows, 8 per step: 40 steps cross three epochs
    straight = _run(TokenWindows(shards, 32, 8, seed=3), 40)
    first = TokenWindows(shards, 32, 8, seed=3)
    head = _run(first, 17)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores
    resumed = TokenWindows(shards, 32, 8, seed=3)
    resumed.load_state_dict(state)
    tail = _run(resumed, 23)
    assert all(torch.equal(a, b) for a, b in zip(straight, head + tail))
    assert first.epoch < resumed.epoch  # the resumed part crossed an epoch boundary


def test_epochs_reshuffle_and_move_window_boundaries(shards):
    loader = TokenWindows(shards, 32, 8, seed=0)
    per_epoch = len(loader._order_for(0)[0]) // 8
    e0 = torch.cat(_run(loader, per_epoch))
    e1 = torch.cat(_run(loader, per_epoch))
    assert loader.epoch == 1
    starts0, starts1 = set(e0[:, 0].tolist()), set(e1[:, 0].tolist())
    assert len(starts0) == len(e0)  # no window twice within an epoch
    assert starts0 != starts1


def test_ranks_split_the_global_batch_without_overlap(shards):
    single = TokenWindows(shards, 16, 8, seed=1)
    ranks = [TokenWindows(shards, 16, 4, rank=r, world_size=2, seed=1) for r in range(2)]
    for _ in range(30):
        whole = single.next_batch()[0]
        parts = [r.next_batch()[0] for r in ranks]
        assert torch.equal(whole, torch.cat(parts))
        assert not set(parts[0][:, 0].tolist()) & set(parts[1][:, 0].tolist())


def test_resume_with_another_world_size_continues_the_global_order(shards):
    single = TokenWindows(shards, 16, 8, seed=1)
    _run(single, 5)
    state = single.state_dict()
    expected = single.next_batch()[0]
    ranks = [TokenWindows(shards, 16, 4, rank=r, world_size=2, seed=1) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    assert torch.equal(expected, torch.cat([r.next_batch()[0] for r in ranks]))


def test_state_from_other_data_or_shape_is_refused(shards, tmp_path):
    state = TokenWindows(shards, 16, 4).state_dict()
    with pytest.raises(LoaderStateError, match="seq_len"):
        TokenWindows(shards, 32, 4).load_state_dict(state)
    with pytest.raises(LoaderStateError, match="shards"):
        TokenWindows(shards[:2], 16, 4).load_state_dict(state)


def test_shards_from_different_tokenizers_are_refused(shards, tmp_path):
    other = _shard(tmp_path / "x", "d", [500], 300_000, tok_hash="h2")
    with pytest.raises(TokenShardError, match="different tokenizers"):
        TokenWindows([*shards, other], 16, 4)


def test_too_little_data_for_one_step(tmp_path):
    small = _shard(tmp_path, "s", [40], 1)
    with pytest.raises(TokenShardError, match="fewer than one step"):
        TokenWindows([small], seq_len=32, batch_size=4)


def test_validation_windows_are_dealt_to_ranks_once(shards):
    every = torch.cat([x for x, _ in validation_batches(shards, 16, 2)])
    dealt = [torch.cat([x for x, _ in validation_batches(shards, 16, 2, rank=r, world_size=2)]) for r in range(2)]
    union = torch.cat(dealt)
    # the first rounds of batches, each window once; at most world_size - 1 batches dropped
    assert sorted(every[:len(union), 0].tolist()) == sorted(union[:, 0].tolist())
    assert len(every) - len(union) < 2 * 2
    assert len(set(every[:, 0].tolist())) == len(every)


def test_an_epoch_shorter_than_one_step_is_refused_up_front(tmp_path):
    # 144 tokens, windows of 33: 4 windows at shift 0 but only 3 at larger shifts
    shard = _shard(tmp_path, "s", [143], 1)
    with pytest.raises(TokenShardError, match="fewer than one step"):
        TokenWindows([shard], seq_len=32, batch_size=4)


def test_state_from_a_re_encoded_shard_is_refused(shards, tmp_path):
    state = TokenWindows(shards, 16, 4).state_dict()
    other = _shard(tmp_path / "y", "a", [300, 50, 690], 1)  # same name and tokenizer, fewer tokens
    with pytest.raises(LoaderStateError, match="tokens"):
        TokenWindows([other, *shards[1:]], 16, 4).load_state_dict(state)


def test_every_rank_gets_the_same_number_of_validation_batches(shards):
    counts = [len(list(validation_batches(shards, 16, 3, rank=r, world_size=2))) for r in range(2)]
    assert counts[0] == counts[1] > 0


def test_bytes_per_token_of_the_windows_evaluated(tmp_path):
    """Bits per byte divide by the bytes per token of the windows actually evaluated: a
    capped evaluation that reads only the first shard uses that shard's ratio."""
    a = _shard(tmp_path, "a", [300, 50], 1, bytes_per_token=2.0)  # val: 352 tokens, 21 windows of 16
    b = _shard(tmp_path, "b", [1200, 40], 100_000, bytes_per_token=5.0)  # val: 1242 tokens, 77 windows
    assert validation_bytes_per_token([a, b], 16, 4, max_batches=5) == pytest.approx(2.0)
    # all 98 windows: 24 batches of 4 use 21 of a's windows and 75 of b's
    assert validation_bytes_per_token([a, b], 16, 4) == pytest.approx((21 * 2 + 75 * 5) / 96)
    assert sum(len(x) for x, _ in validation_batches([a, b], 16, 4)) == 96


def _group(first_tokens: torch.Tensor) -> list[str]:
    """The shard of each window, from its first token (a < 100,000 <= b < 200,000 <= c)."""
    return ["a" if t < 100_000 else "b" if t < 200_000 else "c" for t in first_tokens.tolist()]


def _mix(shards, replay: float, **kw) -> MixtureWindows:
    return MixtureWindows([Source("new", [shards[2]], 1 - replay), Source("replay", shards[:2], replay)], 16,
                          kw.pop("batch_size", 8), seed=kw.pop("seed", 5), **kw)


@pytest.mark.parametrize("replay, batch", [(0.25, 8), (0.3, 10), (0.0, 8), (1.0, 8)])
def test_mixture_gives_the_configured_share_of_windows(shards, replay, batch):
    loader = _mix(shards, replay, batch_size=batch)
    steps = 60  # c has ~50 windows of 16: the new group goes through several epochs
    groups = [g for x in _run(loader, steps) for g in _group(x[:, 0])]
    new = groups.count("c")
    # stratified, not drawn: the share is exact to within one window, at every step
    assert abs(new - (1 - replay) * steps * batch) <= 1
    assert loader.windows_per_source() == {"new": new, "replay": len(groups) - new}
    if 0 < replay < 1:  # the replayed windows come from both old shards, and every step mixes
        assert {"a", "b"} <= set(groups)
        assert all(0 < _group(x[:, 0]).count("c") < batch for x in _run(loader, 10))


def test_mixture_is_deterministic_and_resumes_exactly(shards):
    straight = _run(_mix(shards, 0.25), 50)
    assert all(torch.equal(a, b) for a, b in zip(straight, _run(_mix(shards, 0.25), 50)))
    assert not all(torch.equal(a, b) for a, b in zip(straight, _run(_mix(shards, 0.25, seed=6), 50)))
    first = _mix(shards, 0.25)
    head = _run(first, 21)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores: a few integers
    assert (state["slots"], len(state["epoch"]), len(state["cursor"])) == (21 * 8, 2, 2)
    resumed = _mix(shards, 0.25)
    resumed.load_state_dict(state)
    tail = _run(resumed, 29)
    assert all(torch.equal(a, b) for a, b in zip(straight, head + tail))
    assert resumed.epoch[0] > first.epoch[0]  # the new group's epoch turned after the resume


def test_mixture_ranks_split_the_global_batch_without_overlap(shards):
    single = _mix(shards, 0.25, batch_size=8)
    ranks = [_mix(shards, 0.25, batch_size=4, rank=r, world_size=2) for r in range(2)]
    for _ in range(30):
        whole = single.next_batch()[0]
        parts = [r.next_batch()[0] for r in ranks]
        assert torch.equal(whole, torch.cat(parts))
        assert not set(parts[0][:, 0].tolist()) & set(parts[1][:, 0].tolist())
    # and a run resumed on two ranks continues the single process's global order
    state, expected = single.state_dict(), single.next_batch()[0]
    two = [_mix(shards, 0.25, batch_size=4, rank=r, world_size=2) for r in range(2)]
    for r in two:
        r.load_state_dict(state)
    assert torch.equal(expected, torch.cat([r.next_batch()[0] for r in two]))


def test_mixture_state_from_another_mixture_is_refused(shards):
    state = _mix(shards, 0.25).state_dict()
    with pytest.raises(LoaderStateError, match="sources"):
        _mix(shards, 0.5).load_state_dict(state)
    with pytest.raises(LoaderStateError, match="sources"):
        MixtureWindows([Source("new", [shards[1]], 0.75), Source("replay", [shards[0], shards[2]], 0.25)], 16,
                       8, seed=5).load_state_dict(state)


def test_mixture_refuses_a_shard_in_two_groups_and_empty_groups(shards):
    with pytest.raises(ValueError, match="two sources"):
        MixtureWindows([Source("new", shards[:2], 0.5), Source("replay", shards[1:], 0.5)], 16, 8)
    with pytest.raises(ValueError, match="at least one shard"):
        MixtureWindows([Source("new", shards, 0.5), Source("replay", [], 0.5)], 16, 8)
