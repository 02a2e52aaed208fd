"""Export a checkpoint as a Hugging Face model directory that transformers, vLLM and
llama.cpp's converter load as they are.

The directory holds config.json (LlamaForCausalLM, or Qwen3ForCausalLM with q/k norms),
generation_config.json, model.safetensors (our names are Llama's), the tokenizer files
with the chat template, yunque_export.json (where it came from and, with `lineage`, the
chain back to the raw shards, so a copied export still knows it) and, with --gguf, the
GGUF files (model/export/gguf.py). The files: docs/use.md#export-the-exported_model-asset.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from model.checkpoint.load import Loaded
from model.core.chat import ChatTokenizer
from model.core.config import ModelConfig
from model.core.gguf_types import ALL_GGUF_TYPES

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
RECORD_FILE = "yunque_export.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def hf_config(cfg: ModelConfig, tok: ChatTokenizer, dtype: str = "float32") -> dict:
    arch, model_type = ("Qwen3ForCausalLM", "qwen3") if cfg.qk_norm else ("LlamaForCausalLM", "llama")
    return {
        "architectures": [arch], "model_type": model_type,
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.dim, "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.context, "rms_norm_eps": cfg.norm_eps,
        # both spellings: transformers 5 reads rope_parameters, 4.x and vLLM rope_theta
        "rope_theta": cfg.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings, "initializer_range": 0.02,
        "bos_token_id": None, "eos_token_id": [tok.end_id, tok.eot_id], "pad_token_id": tok.eot_id,
        "dtype": dtype, "torch_dtype": dtype, "use_cache": True,
    }


def export_hf(loaded: Loaded, out: Path, dtype: str = "float32", gguf: Sequence[str] = (),
              lineage: dict | None = None) -> dict:
    """Write the directory, with a GGUF file for each type in `gguf`; return what was
    written (paths, sizes) for metadata. `lineage` ({"source": ..., "lineage": record})
    goes into the record as it is."""
    from model.export.gguf import write_gguf

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if bad := [q for q in gguf if q not in ALL_GGUF_TYPES]:
        raise ValueError(f"unknown GGUF type(s) {bad}: choose from {list(ALL_GGUF_TYPES)}")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("model-*.gguf"):  # an earlier export's GGUF types, not asked for now
        if stale.name not in {f"model-{q}.gguf" for q in gguf}:
            stale.unlink()
    cfg, tok = loaded.config, loaded.tokenizer
    weights = {k: v.detach().to(DTYPES[dtype]).contiguous().cpu() for k, v in loaded.model.state_dict().items()}
    if cfg.tie_embeddings:
        weights.pop("lm_head.weight", None)  # transformers ties it back from the embedding
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf_config(cfg, tok, dtype), indent=2))
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [tok.end_id, tok.eot_id], "pad_token_id": tok.eot_id, "bos_token_id": None}, indent=2))
    for name in TOKENIZER_FILES:
        if (tok.directory / name).exists():
            shutil.copy2(tok.directory / name, out / name)
    files = {"model.safetensors": (out / "model.safetensors").stat().st_size}
    if gguf:
        full = {k: v.detach().float().cpu() for k, v in loaded.model.state_dict().items()}
        for qtype in gguf:
            path = write_gguf(full, cfg, tok.directory, out / f"model-{qtype}.gguf", qtype)
            files[path.name] = path.stat().st_size
    state = loaded.state
    record = {"checkpoint": str(loaded.checkpoint.path), "step": loaded.checkpoint.step,
              "metrics": state.get("metrics", {}), "architecture": hf_config(cfg, tok)["architectures"][0],
              "dtype": dtype, "files": files, **(lineage or {})}
    (out / RECORD_FILE).write_text(json.dumps(record, indent=2))
    return record
