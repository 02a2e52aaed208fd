"""The model: shapes, parameter count, initial loss, overfitting, and exact agreement with
transformers' LlamaForCausalLM given the same weights."""

from __future__ import annotations

import math

import pytest
import torch

from model.core.config import ModelConfig, tiny
from model.core.gpt import GPT


def _cfg(**kw) -> ModelConfig:
    return ModelConfig(**{"dim": 64, "n_layers": 2, "n_heads": 2, "ffn_dim": 128, "context": 32,
                          "vocab_size": 300, **kw})


def test_shapes_and_parameter_count():
    cfg = tiny()
    model = GPT(cfg)
    assert model.num_params() == cfg.num_params()
    logits, loss = model(torch.randint(0, cfg.vocab_size, (2, 16)))
    assert logits.shape == (2, 16, cfg.vocab_size) and loss is None
    untied = _cfg(tie_embeddings=False, n_kv_heads=1, qk_norm=True)
    assert GPT(untied).num_params() == untied.num_params()


def test_initial_loss_is_about_ln_vocab():
    torch.manual_seed(0)
    cfg = _cfg()
    x, y = torch.randint(0, cfg.vocab_size, (2, 8, 32))
    _, loss = GPT(cfg)(x, y)
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.1


def test_overfits_one_batch():
    torch.manual_seed(0)
    cfg = _cfg()
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (4, 33))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_context_is_enforced():
    with pytest.raises(ValueError, match="exceeds the model context"):
        GPT(_cfg())(torch.zeros(1, 33, dtype=torch.long))


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 1, "tie_embeddings": False}])
def test_logits_equal_transformers_llama(kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = _cfg(**kw)
    ours = GPT(cfg).eval()
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, attention_bias=False, mlp_bias=False)
    hf = LlamaForCausalLM(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    x = torch.randint(0, cfg.vocab_size, (2, cfg.context))
    with torch.no_grad():
        a = ours(x)[0]
        b = hf(x).logits
    assert (a - b).abs().max().item() < 1e-5
