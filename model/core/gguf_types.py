"""The GGUF file types an export writes and a server loads, named once and torch-free (the
export writes them with `gguf`, the server and its command line only name them)."""

from __future__ import annotations

from typing import Literal, get_args

GgufType = Literal["f16", "q8_0", "q4_0"]
GGUF_TYPES: tuple[str, ...] = get_args(GgufType)  # what exports write by default
# f32 as well on request: llama.cpp then computes in fp32 throughout, the logits of our own
# model (the serving tests compare greedy answers with `yunque chat` on it)
ALL_GGUF_TYPES: tuple[str, ...] = ("f32", *GGUF_TYPES)
