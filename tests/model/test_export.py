"""The Hugging Face export loads in transformers, offline, and computes what we compute."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from model.checkpoint.load import load
from model.core.generate import Sampling, generate
from model.core.gguf_types import GGUF_TYPES
from model.export import check
from model.export.check import QUANT_TOLERANCE, check_export, check_gguf
from model.export.hf import export_hf
from tests.support.factory import tiny_checkpoint

VARIANTS = {"llama-tied": {}, "gqa-untied": {"n_kv_heads": 2, "tie_embeddings": False},
            "qwen3-qknorm": {"qk_norm": True}}
TEXTS = ["La casa del sistema", "¿Cuánto es 12 + 34? <answer>46</answer>", "ñandú, acción 2024\n\n  fin"]


@pytest.fixture(scope="module", params=list(VARIANTS))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    loaded = load(tiny_checkpoint(root, **VARIANTS[request.param]))
    record = export_hf(loaded, root / "hf", gguf=GGUF_TYPES)
    return loaded, root / "hf", record


def test_transformers_logits_and_greedy_tokens_match(exported, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded, out, record = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    expected = "Qwen3ForCausalLM" if loaded.config.qk_norm else "LlamaForCausalLM"
    assert type(hf).__name__ == expected == record["architecture"]
    ids = [loaded.tokenizer.encode(t) for t in TEXTS]
    with torch.no_grad():
        for row in ids:
            x = torch.tensor([row])
            ours, theirs = loaded.model(x)[0], hf(x).logits
            assert (ours - theirs).abs().max().item() <= 1e-4
            assert ours.std() > 0.5  # logits far from flat: the comparison means something
        ref = generate(loaded.model, [ids[0]], Sampling(max_new_tokens=20))[0]
        out_ids = hf.generate(torch.tensor([ids[0]]), max_new_tokens=20, do_sample=False,
                              eos_token_id=None, pad_token_id=loaded.tokenizer.eot_id)
    assert out_ids[0, len(ids[0]):].tolist() == ref


def test_tokenizer_and_chat_template_match(exported, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded, out, _ = exported
    tok = transformers.AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        assert tok(text, add_special_tokens=False)["input_ids"] == loaded.tokenizer.encode(text)
    messages = [{"role": "system", "content": "Responde en español."},
                {"role": "user", "content": "¿Cuánto es 7 por 8?"},
                {"role": "assistant", "content": "<answer>56</answer>"}, {"role": "user", "content": "¿Y 9 por 9?"}]
    theirs = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert theirs == loaded.tokenizer.encode_chat(messages)
    assert tok.eos_token == "<|endoftext|>"


def test_gguf_files_load_in_transformers_with_our_logits(exported):
    """Each GGUF file: transformers computes what our model computes with the weights as
    the file stores them (layout, names, rotary permutation right), and the quantization
    error against full precision stays within its tolerance."""
    loaded, out, record = exported
    results = check_export(loaded, out, TEXTS, [f"model-{q}.gguf" for q in GGUF_TYPES])
    assert results["hf"]["passed"] and results["hf"]["max_abs_diff"] <= 1e-4
    for q in GGUF_TYPES:
        r = results[q]
        assert r["format_max_abs_diff"] <= 1e-4 and r["format_greedy_tokens_equal"], (q, r)
        assert r["quant_tolerance"] == QUANT_TOLERANCE[q] and r["quant_relative_diff"] <= QUANT_TOLERANCE[q], (q, r)
        assert r["passed"], (q, r)
    # the rounding is real and grows as bits are dropped
    assert 0 < results["f16"]["quant_max_abs_diff"] < results["q8_0"]["quant_max_abs_diff"] \
        < results["q4_0"]["quant_max_abs_diff"]
    sizes = record["files"]
    assert sizes["model-q4_0.gguf"] < sizes["model-q8_0.gguf"] < sizes["model-f16.gguf"]


def test_q4_0_is_judged_and_an_unknown_type_is_refused(exported, monkeypatch):
    """q4_0's quantization error is held to a tolerance of its own (model/export/check.py
    says why 0.5): a tighter one than its error fails the check; a type without one is an
    error, not a pass."""
    loaded, out, _ = exported
    r = check_gguf(loaded, out, "model-q4_0.gguf", TEXTS)
    assert r["passed"] and 0.05 < r["quant_relative_diff"] <= QUANT_TOLERANCE["q4_0"], r
    monkeypatch.setitem(check.QUANT_TOLERANCE, "q4_0", r["quant_relative_diff"] / 2)
    assert not check_gguf(loaded, out, "model-q4_0.gguf", TEXTS)["passed"]
    with pytest.raises(ValueError, match="no quantization tolerance for GGUF type 'q4_k'"):
        check_gguf(loaded, out, "model-q4_k.gguf", TEXTS)


def test_gguf_file_alone_carries_the_tokenizer(exported, tmp_path, monkeypatch):
    """What llama.cpp reads: tokens, merges, pre-tokenizer, special ids and chat template
    from the GGUF file alone give our ids (checked through transformers' GGUF reader)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded, out, _ = exported
    (tmp_path / "model-q8_0.gguf").symlink_to(out / "model-q8_0.gguf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="model-q8_0.gguf")
    for text in [*TEXTS, "  hola\n\n\n mundo 12345"]:
        assert tok(text, add_special_tokens=False)["input_ids"] == loaded.tokenizer.encode(text)
    assert tok.eos_token == "<|endoftext|>"
    chat = [{"role": "user", "content": "¿Cuánto es 7 por 8?"}]
    assert tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == \
        loaded.tokenizer.decode(loaded.tokenizer.encode_chat(chat))


def test_export_records_where_it_came_from(exported):
    loaded, out, _ = exported
    saved = json.loads((out / "yunque_export.json").read_text())
    assert saved["checkpoint"] == str(loaded.checkpoint.path) and saved["step"] == 10
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eos_token_id"] == [loaded.tokenizer.end_id, loaded.tokenizer.eot_id]
    assert cfg["tie_word_embeddings"] == loaded.config.tie_embeddings
