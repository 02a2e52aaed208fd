"""GGUF export: one file with the weights, the architecture and the tokenizer, which
llama.cpp runs and transformers loads with `from_pretrained(dir, gguf_file=...)`.

Written as llama.cpp's own `convert_hf_to_gguf.py` writes it: tensor names from the gguf
package's map (so they cannot drift from llama.cpp's), q and k rows permuted for `llama`'s
interleaved rotary layout (not for `qwen3`), norms in f32, and the tokenizer as byte-level
BPE with llama.cpp's "qwen2" pre-tokenizer and the chat template. What each choice is
for: docs/use.md#export-the-exported_model-asset.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from model.core.config import ModelConfig
from model.core.gguf_types import ALL_GGUF_TYPES
from pipelines.tokens.tokenizer import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    END_OF_TURN,
    EOT,
    TEXT_TOKENS,
    TOKENIZER_FILE,
)

PRE_TOKENIZER = "qwen2"


def _types():
    import gguf

    return {"f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
            "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
            "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
            "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0)}


def arch_name(cfg: ModelConfig) -> str:
    return "qwen3" if cfg.qk_norm else "llama"


def permute_for_llama(w: torch.Tensor, heads: int) -> torch.Tensor:
    """(heads * E, D) with each head's rows as [first halves, second halves] -> rows as
    interleaved pairs, llama.cpp's rotary layout (transformers undoes exactly this)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tensors(weights: dict[str, torch.Tensor], cfg: ModelConfig):
    """(GGUF name, float32 array) in a stable order."""
    import gguf

    arch = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen3": gguf.MODEL_ARCH.QWEN3}[arch_name(cfg)]
    names = gguf.get_tensor_name_map(arch, cfg.n_layers)
    for hf_name, t in weights.items():
        if cfg.tie_embeddings and hf_name == "lm_head.weight":
            continue  # llama.cpp and transformers use token_embd when output.weight is absent
        base, _, suffix = hf_name.rpartition(".")
        name = names.get_name(base)
        if name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name!r} in the {arch_name(cfg)} architecture")
        t = t.detach().float().cpu()
        if arch_name(cfg) == "llama" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            t = permute_for_llama(t, cfg.n_heads if "q_proj" in hf_name else cfg.kv_heads)
        yield f"{name}.{suffix}", t.numpy()


def _stored(arr: np.ndarray, qtype: str):
    """(data as written, its GGML type or None for plain numpy dtypes)."""
    import gguf

    ggml_type = _types()[qtype][0]
    if arr.ndim == 1 or qtype == "f32":
        return arr.astype(np.float32), None
    if qtype == "f16" or arr.shape[-1] % 32:
        return arr.astype(np.float16), None
    return gguf.quants.quantize(arr, ggml_type), ggml_type


def rounded(weights: dict[str, torch.Tensor], qtype: str) -> dict[str, torch.Tensor]:
    """Our state dict with every tensor rounded as the GGUF file of `qtype` stores it: a
    model with these weights computes what a correct reader of the file computes, which
    separates format errors (names, layout, permutation) from quantization error.
    Rounding is per row, so it commutes with the llama q/k row permutation."""
    import gguf

    out = {}
    for name, t in weights.items():
        data, ggml_type = _stored(t.detach().float().cpu().numpy(), qtype)
        back = gguf.quants.dequantize(data, ggml_type) if ggml_type is not None else data.astype(np.float32)
        out[name] = torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32)).reshape(t.shape).to(t.dtype)
    return out


def _vocabulary(tokenizer_dir: Path) -> tuple[list[str], list[int], list[str]]:
    """Tokens (ids 0..V-1), their GGUF types, the merges as "a b" strings."""
    import gguf

    spec = json.loads((tokenizer_dir / TOKENIZER_FILE).read_text(encoding="utf-8"))
    by_id = {i: t for t, i in spec["model"]["vocab"].items()}
    by_id |= {a["id"]: a["content"] for a in spec.get("added_tokens", [])}
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError(f"{tokenizer_dir / TOKENIZER_FILE}: token ids are not contiguous from 0")
    tokens = [by_id[i] for i in range(len(by_id))]
    kinds = {**dict.fromkeys(CONTROL_TOKENS, gguf.TokenType.CONTROL),
             **dict.fromkeys(TEXT_TOKENS, gguf.TokenType.USER_DEFINED)}
    types = [int(kinds.get(t, gguf.TokenType.NORMAL)) for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return tokens, types, merges


def write_gguf(weights: dict[str, torch.Tensor], cfg: ModelConfig, tokenizer_dir: Path, path: Path,
               qtype: str = "q8_0", name: str = "yunque") -> Path:
    """Write `path`; `weights` is our (float) state dict."""
    import gguf

    if qtype not in ALL_GGUF_TYPES:
        raise ValueError(f"GGUF type must be one of {ALL_GGUF_TYPES}, got {qtype!r}")
    file_type = _types()[qtype][1]
    tokens, types, merges = _vocabulary(tokenizer_dir)
    if len(tokens) != cfg.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokens)} tokens, the model {cfg.vocab_size}")
    arch = arch_name(cfg)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(int(file_type))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.dim)
    w.add_block_count(cfg.n_layers)
    w.add_feed_forward_length(cfg.ffn_dim)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE_TOKENIZER)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    # no BOS is ever added; naming one keeps llama.cpp from guessing an ordinary token
    w.add_bos_token_id(tokens.index(EOT))
    w.add_eos_token_id(tokens.index(EOT))
    w.add_pad_token_id(tokens.index(EOT))
    w.add_eot_token_id(tokens.index(END_OF_TURN))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for tname, arr in _tensors(weights, cfg):
        data, raw = _stored(arr, qtype)
        w.add_tensor(tname, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
