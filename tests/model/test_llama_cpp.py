"""The GGUF export in llama.cpp itself (llama-cpp-python): it loads, tokenizes as we do,
reads the chat template and the stop tokens, and computes our logits.

llama.cpp also rounds activations inside its matmuls (to f16 against f16 weights, to q8_0,
8 bits in blocks of 32, against q8_0 and q4_0 weights), so its logits are compared twice,
neither at fp32's 1e-4: with our model at the weights the file stores (model.export.gguf.
rounded), where only that activation rounding remains, at the tolerance of the type it rounds
to; and with our full-precision model at the file type's quantization tolerance
(model/export/check.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model.checkpoint.load import load
from model.core.gguf_types import GGUF_TYPES
from model.core.gpt import GPT
from model.export.check import QUANT_TOLERANCE
from model.export.gguf import rounded
from model.export.hf import export_hf
from tests.support.factory import tiny_checkpoint

llama_cpp = pytest.importorskip("llama_cpp")

VARIANTS = {"llama-tied": {}, "gqa-untied": {"n_kv_heads": 2, "tie_embeddings": False}, "qwen3-qknorm": {"qk_norm": True}}
# the type llama.cpp rounds activations to for each weight type (ggml's vec_dot_type);
# measured against the rounded weights on the test's models (5 seeds): f16 0.05-0.11% of the
# largest logit, q8_0 0.9-1.8%, q4_0 1.0-2.3%; a q4_0 file with each block's halves swapped: 110-125%
ACTIVATIONS = {"f16": "f16", "q8_0": "q8_0", "q4_0": "q8_0"}
TEXTS = ["La casa del sistema", "¿Cuánto es 12 + 34? <think>12 + 34 = 46</think><answer>46</answer>",
         "ñandú 😀\tacción 2024\n\n  fin"]


@pytest.fixture(scope="module", params=list(VARIANTS))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    loaded = load(tiny_checkpoint(root, **VARIANTS[request.param]))
    export_hf(loaded, root / "hf", gguf=GGUF_TYPES)
    return loaded, root / "hf"


@pytest.mark.parametrize("qtype", GGUF_TYPES)
def test_llama_cpp_computes_our_logits(exported, qtype):
    loaded, out = exported
    # n_ctx 256: llama.cpp's own minimum, which it applies anyway (the Python side sizes its
    # logits buffer by the value given); every text here is shorter than the model's 64
    path = str(out / f"model-{qtype}.gguf")
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_batch=64, n_threads=2, verbose=False)
    tok = loaded.tokenizer
    stored = GPT(loaded.config)  # our model with the weights as the file stores them
    stored.load_state_dict(rounded(loaded.model.state_dict(), qtype))
    stored.eval()
    for text in TEXTS:
        ids = tok.encode(text)
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == ids, text
        llm.reset()
        llm.eval(ids)
        theirs = np.asarray(llm.scores[:len(ids)], dtype=np.float64)
        with torch.no_grad():
            ours = loaded.model(torch.tensor([ids]))[0].double().numpy()
            same_weights = stored(torch.tensor([ids]))[0].double().numpy()
        scale = np.abs(ours).max()
        assert scale > 1.0  # far from flat logits: the comparison means something
        reading = np.abs(theirs - same_weights).max() / scale  # a misread block or layout shows here
        assert reading <= QUANT_TOLERANCE[ACTIVATIONS[qtype]], (text, reading)
        quantization = np.abs(theirs - ours).max() / scale
        assert quantization <= QUANT_TOLERANCE[qtype], (text, quantization)
    # the chat template and the stop tokens come from the file alone
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    assert llm.metadata["tokenizer.ggml.pre"] == "qwen2"
    chat = [{"role": "system", "content": "Responde en español."}, {"role": "user", "content": "¿Cuánto es 7 por 8?"}]
    template = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"], eos_token="<|endoftext|>",
                                   bos_token="")
    rendered = template(messages=chat).prompt
    assert llm.tokenize(rendered.encode(), add_bos=False, special=True) == tok.encode_chat(chat)
    assert llm.token_eos() == tok.eot_id and llm.token_bos() == tok.eot_id
    vocab = llm._model.vocab
    assert llama_cpp.llama_vocab_eot(vocab) == tok.end_id
    assert llama_cpp.llama_vocab_is_eog(vocab, tok.end_id) and llama_cpp.llama_vocab_is_eog(vocab, tok.eot_id)
