"""Does the serving ecosystem read the export as we meant it? Load the exported directory
(and each GGUF file) in transformers, offline, and compare its logits and greedy tokens
with our model's on the same ids.

A GGUF file is judged twice. Format: against our model with its weights rounded exactly
as the file stores them (model.export.gguf.rounded), where any difference beyond fp32
noise is a reading error (a name, a layout, the rotary permutation). Quantization:
against our full-precision model, the error a user of that file accepts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from model.checkpoint.load import Loaded
from model.core.chat import ChatTokenizer
from model.core.generate import Sampling, generate
from model.core.gpt import GPT

FORMAT_TOLERANCE = 1e-4  # max |logit difference| for the same weights: the fp32 bound
# Quantization error accepted: max |logit difference| from our fp32 model, relative to the
# largest |logit| of the texts. f16 rounds each weight to 11 significant bits; q8_0 keeps 8
# bits per weight in blocks of 32 (step amax/127). Greedy tokens are not judged against
# full precision: a near tie flips them (q4_0 kept them on 12 of the 31 models below).
#
# q4_0 keeps 4 bits in blocks of 32 with an f16 scale: step amax/8, error up to amax/16
# (amax/8 at the clipped end), 127/8 ~ 16x q8_0's step; on Gaussian weights an RMS error
# of 8.6% of the weights' RMS against q8_0's 0.54%. At first order the logit error grows
# with the step, so q4_0's is ~16x q8_0's (measured 10-22x on the 31 models below). The
# bound is 16x the largest q8_0 error on the test's model (3.1%): 0.5, the error stays under
# half the largest logit. Measured in transformers (llama.cpp within 0.015; per text, as
# tests/model/test_llama_cpp.py judges it, up to 0.41):
#   the test's random model (dim 64, 2 layers; 3 variants x 5 seeds)   0.19-0.38
#   dim 256, 6 layers, the same per-layer gain (std 0.04; 4 models)     0.32-0.39
#   dim 256, 6 layers, GPT's init (std 0.02; 4 models)                  0.14-0.17
#   the trained tiny preset (2 base models, SFT, GRPO)                  0.10-0.20
#   dim 256, 6 layers at the test's std 0.08 (4 models)                 0.70-0.80
# The last is an init that amplifies any perturbation (q8_0 over its 5% there too, argmax
# agreeing with ours on 21-34% of positions at q4_0): that q4_0 file no longer acts as the
# model, and the check says so. A misread q4_0 file (each block's halves swapped) is off
# by 1.2-1.4.
QUANT_TOLERANCE = {"f16": 1e-2, "q8_0": 5e-2, "q4_0": 0.5}


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def compare(model: GPT, tok: ChatTokenizer, hf_model, texts: Sequence[str], new_tokens: int = 16) -> dict:
    diff, scale, agree, total = 0.0, 0.0, 0, 0
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([tok.encode(text)])
            ours = model(ids)[0].float()
            theirs = hf_model(ids).logits.float()
            diff = max(diff, (ours - theirs).abs().max().item())
            scale = max(scale, ours.abs().max().item())
            agree += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
            total += ids.shape[1]
        first = tok.encode(texts[0])
        ref = generate(model, [first], Sampling(max_new_tokens=new_tokens))[0]
        out = hf_model.generate(torch.tensor([first]), max_new_tokens=new_tokens, do_sample=False,
                                eos_token_id=None, pad_token_id=tok.eot_id)[0, len(first):].tolist()
    return {"max_abs_diff": diff, "max_abs_logit": scale, "argmax_agreement": round(agree / total, 4),
            "greedy_tokens_equal": out == ref}


def _twin(loaded: Loaded, weights: dict[str, torch.Tensor]) -> GPT:
    """Our model with other (rounded) weights, in fp32."""
    twin = GPT(loaded.config)
    twin.load_state_dict({k: v.float() for k, v in weights.items()})
    return twin.eval()


def check_gguf(loaded: Loaded, out: Path, name: str, texts: Sequence[str]) -> dict:
    import transformers

    qtype = name.removeprefix("model-").removesuffix(".gguf")
    if qtype not in QUANT_TOLERANCE:
        raise ValueError(f"{name}: no quantization tolerance for GGUF type {qtype!r} (known: {list(QUANT_TOLERANCE)})")
    tolerance = QUANT_TOLERANCE[qtype]
    # transformers' GGUF reader ignores qwen3's head size (attention.key_length) and assumes
    # 128; the directory's config.json says what it is.
    extra = {"config": transformers.AutoConfig.from_pretrained(out)} if loaded.config.qk_norm else {}
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, gguf_file=name, dtype=torch.float32,
                                                           **extra).eval()
    from model.export.gguf import rounded

    fmt = compare(_twin(loaded, rounded(loaded.model.state_dict(), qtype)), loaded.tokenizer, hf, texts)
    quant = compare(loaded.model, loaded.tokenizer, hf, texts)
    rel = quant["max_abs_diff"] / max(quant["max_abs_logit"], 1e-12)
    format_ok = fmt["max_abs_diff"] <= FORMAT_TOLERANCE and fmt["greedy_tokens_equal"]
    quant_ok = rel <= tolerance
    return {"format_max_abs_diff": fmt["max_abs_diff"], "format_greedy_tokens_equal": fmt["greedy_tokens_equal"],
            "quant_max_abs_diff": quant["max_abs_diff"], "quant_relative_diff": round(rel, 5),
            "quant_tolerance": tolerance, "argmax_agreement_vs_full": quant["argmax_agreement"],
            "greedy_tokens_equal_vs_full": quant["greedy_tokens_equal"], "passed": format_ok and quant_ok}


def check_export(loaded: Loaded, out: Path, texts: Sequence[str], gguf_files: Sequence[str] = (),
                 dtype: str = "float32") -> dict[str, dict]:
    """{"hf": the safetensors directory, and each GGUF type: comparison + passed}. The
    directory is loaded in fp32 and compared with our model at the weights it stores
    (rounded to `dtype`), so a bf16 or f16 export is judged on its format, not its rounding."""
    _offline()
    import transformers

    from model.export.hf import DTYPES

    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ours = loaded.model if dtype == "float32" else \
        _twin(loaded, {k: v.to(DTYPES[dtype]) for k, v in loaded.model.state_dict().items()})
    r = compare(ours, loaded.tokenizer, hf, texts)
    r |= {"dtype": dtype, "passed": r["max_abs_diff"] <= FORMAT_TOLERANCE and r["greedy_tokens_equal"]}
    results = {"hf": r}
    for name in gguf_files:
        results[name.removeprefix("model-").removesuffix(".gguf")] = check_gguf(loaded, out, name, texts)
    return results
