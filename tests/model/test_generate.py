"""Generation: the KV cache changes nothing but speed, batching changes nothing, the
sampling controls do what they say."""

from __future__ import annotations

import itertools

import pytest
import torch

from model.checkpoint.load import LoadError, load
from model.core.generate import Sampling, generate, sample_next
from model.export.quantize import quantize_int8, weight_bytes
from tests.support.factory import tiny_checkpoint


@pytest.fixture(scope="module", params=[{}, {"n_kv_heads": 2, "tie_embeddings": False, "qk_norm": True}],
                ids=["tied", "gqa-untied-qknorm"])
def loaded(request, tmp_path_factory):
    return load(tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), **request.param))


PROMPTS = ["La casa del", "El sistema de archivos se", "Hola"]


def _ids(loaded, texts=PROMPTS):
    return [loaded.tokenizer.encode(t) for t in texts]


def test_greedy_with_cache_equals_without(loaded):
    s = Sampling(max_new_tokens=40)
    with_cache = generate(loaded.model, _ids(loaded), s, use_cache=True)
    without = generate(loaded.model, _ids(loaded), s, use_cache=False)
    assert with_cache == without
    assert all(len(row) == 40 for row in with_cache)  # no stop tokens given


def test_batched_left_padded_rows_decode_as_alone(loaded):
    s = Sampling(max_new_tokens=20)
    batched = generate(loaded.model, _ids(loaded), s)
    alone = [generate(loaded.model, [p], s)[0] for p in _ids(loaded)]
    assert batched == alone


def test_cached_logits_match_full_forward(loaded):
    """Through the cache, in chunks of 3, 2, then single tokens (a multi-token chunk after
    the first sees the cache through a bottom-right causal mask), each position's logits
    equal the full forward's."""
    from model.core.gpt import KVCache

    ids = torch.tensor([_ids(loaded)[1]])
    assert ids.shape[1] >= 7
    full, _ = loaded.model(ids)
    cache = KVCache(loaded.config, 1, ids.shape[1])
    bounds = [0, 3, 5, *range(6, ids.shape[1] + 1)]
    steps = [loaded.model(ids[:, a:b], cache=cache)[0] for a, b in itertools.pairwise(bounds)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_stop_tokens_end_a_row_and_are_not_returned(loaded):
    ids = _ids(loaded)
    free = generate(loaded.model, ids, Sampling(max_new_tokens=12))
    stop = free[0][5]  # a token the first row produces at position 5
    out = generate(loaded.model, ids, Sampling(max_new_tokens=12, stop=(stop,)))
    assert out[0] == free[0][:free[0].index(stop)]
    for got, ref in zip(out[1:], free[1:]):  # other rows stop only where they produce it
        assert got == (ref[:ref.index(stop)] if stop in ref else ref)


def test_sampling_is_seeded_and_top_k_one_is_greedy(loaded):
    ids = _ids(loaded)
    hot = Sampling(max_new_tokens=16, temperature=1.5, seed=7)
    assert generate(loaded.model, ids, hot) == generate(loaded.model, ids, hot)
    assert generate(loaded.model, ids, hot) != generate(loaded.model, ids, Sampling(16, 1.5, seed=8))
    greedy = generate(loaded.model, ids, Sampling(max_new_tokens=16))
    assert generate(loaded.model, ids, Sampling(16, temperature=1.0, top_k=1, seed=1)) == greedy
    assert generate(loaded.model, ids, Sampling(16, temperature=1.0, top_p=1e-6, seed=1)) == greedy


def test_top_p_keeps_the_smallest_set_holding_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    s = Sampling(temperature=1.0, top_p=0.75)
    gen = torch.Generator().manual_seed(0)
    drawn = {sample_next(logits, s, gen).item() for _ in range(400)}
    assert drawn == {0, 1}  # 0.5 + 0.3 >= 0.75: tokens 2 and 3 are never drawn
    drawn_k = {sample_next(logits, Sampling(temperature=1.0, top_k=3), gen).item() for _ in range(400)}
    assert drawn_k == {0, 1, 2}


def test_long_prompts_keep_their_latest_tokens(loaded):
    ctx = loaded.config.context
    long = (_ids(loaded)[1] * 40)[: ctx + 30]
    s = Sampling(max_new_tokens=8)
    assert generate(loaded.model, [long], s) == generate(loaded.model, [long[-(ctx - 8):]], s)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(loaded.model, [long], Sampling(max_new_tokens=ctx))


def test_chat_prompt_ids(loaded):
    tok = loaded.tokenizer
    ids = tok.encode_chat([{"role": "user", "content": "¿Cuánto es 2 + 2? <|end|>"}])
    assert ids[0] == tok.role_ids["user"] and ids[-2:] == [tok.role_ids["assistant"], *tok.newline]
    assert ids.count(tok.end_id) == 1  # typed "<|end|>" is text, not the control token
    with pytest.raises(ValueError, match="unknown chat role"):
        tok.encode_chat([{"role": "tool", "content": "x"}])


def test_int8_model_is_smaller_and_close(loaded, tmp_path):
    ref = load(loaded.checkpoint.path)
    q = quantize_int8(load(loaded.checkpoint.path).model)
    ids = torch.tensor([_ids(loaded)[1]])
    with torch.inference_mode():
        a, b = ref.model(ids)[0], q(ids)[0]
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.8
    assert weight_bytes(q) < 0.6 * weight_bytes(ref.model)
    assert len(generate(q, [ids[0].tolist()], Sampling(max_new_tokens=5))[0]) == 5


def test_load_errors_name_the_problem(tmp_path, loaded):
    with pytest.raises(LoadError, match="does not exist"):
        load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="no intact checkpoint"):
        load(tmp_path / "empty")


def test_checkpoints_without_their_own_tokenizer_use_the_one_beside_them(tmp_path, loaded):
    """Checkpoints written before they carried a tokenizer: data/<asset>/step-N finds
    data/tokenizer; with neither, the error says where it looked."""
    import dataclasses
    import shutil

    from model.checkpoint import state as ckpt

    cfg = loaded.config
    old = ckpt.save(tmp_path / "data" / "base_model", 3, loaded.model.state_dict(), {},
                    {"model_config": dataclasses.asdict(cfg)}, tied=cfg.tie_embeddings)
    with pytest.raises(LoadError, match="no tokenizer"):
        load(old.path)
    shutil.copytree(loaded.tokenizer.directory, tmp_path / "data" / "tokenizer")
    again = load(tmp_path / "data" / "base_model")
    assert again.checkpoint.step == 3 and again.tokenizer.vocab_size == cfg.vocab_size


def test_chat_history_drops_whole_old_turns(loaded):
    from model.core.chat import fit_history

    tok = loaded.tokenizer
    system = {"role": "system", "content": "Responde en español."}
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"mensaje número {i} " * 3}
             for i in range(8)]
    full = len(tok.encode_chat([system, *turns]))
    kept, dropped = fit_history(tok, [system, *turns], full)
    assert dropped == 0 and kept == [system, *turns]
    kept, dropped = fit_history(tok, [system, *turns], full - 1)
    assert kept[0] == system and kept[1:] == turns[dropped:] and dropped >= 1
    assert len(tok.encode_chat(kept)) <= full - 1
    kept, _ = fit_history(tok, [system, *turns], 1)  # too small for anything: the newest stays
    assert kept == [system, turns[-1]]
