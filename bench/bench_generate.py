"""Generation throughput: our decoder with and without the KV cache, int8 weights, and
transformers' `generate` on the exported model, in the same process, greedy, the same
number of new tokens for all (no stop tokens).

    python -m bench.bench_generate [--presets tiny,small] [--checkpoint DIR] [--new 256]
                                   [--prompt-len 32] [--batches 1,8] [--threads 2]

Random weights unless --checkpoint is given (the cost does not depend on them); the
presets' context is raised where needed to fit prompt + new tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from bench import common  # noqa: F401 - telemetry switches
from model import checkpoint as ckpt
from model.config import preset
from model.generate import Sampling, generate
from model.gpt import GPT
from model.quantize import quantize_int8, weight_bytes


def _timed(fn, repeats: int = 2) -> float:
    fn()  # warm-up: allocator, kernels
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _checkpoint(name: str, context: int, root: Path) -> Path:
    """A random model of the preset saved with a tokenizer, as training saves it."""
    from tests.factory import tokenizer_dir

    tok = tokenizer_dir(root)
    cfg = dataclasses.replace(preset(name), context=context)
    from tokenizers import Tokenizer

    cfg = cfg.with_vocab(Tokenizer.from_file(str(tok / "tokenizer.json")).get_vocab_size())
    model = GPT(cfg)
    return ckpt.save(root / name, 1, model.state_dict(), {}, {"model_config": dataclasses.asdict(cfg)},
                     tied=cfg.tie_embeddings, tokenizer=tok).path


def bench_model(path: Path, label: str, new: int, prompt_len: int, batches: list[int]) -> None:
    import transformers

    from model.export_hf import export_hf
    from model.load import load

    loaded = load(path)
    cfg = loaded.config
    new = min(new, cfg.context - prompt_len - 1)
    q = quantize_int8(load(path).model)
    with tempfile.TemporaryDirectory() as out:
        export_hf(loaded, Path(out))
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    print(f"\n{label}: {loaded.model.num_params() / 1e6:.1f}M parameters, {cfg.n_layers} layers x {cfg.dim}, "
          f"prompt {prompt_len} + {new} new tokens, greedy; weights fp32 {weight_bytes(loaded.model) / 1e6:.1f} MB, "
          f"int8 {weight_bytes(q) / 1e6:.1f} MB")
    print(f"{'batch':>5} {'ours cache':>11} {'no cache':>9} {'int8 cache':>11} {'HF generate':>12}   "
          f"{'cache/none':>10} {'ours/HF':>8} {'int8/fp32':>9}")
    s = Sampling(max_new_tokens=new)
    for b in batches:
        prompts = torch.randint(16, cfg.vocab_size, (b, prompt_len), generator=torch.Generator().manual_seed(b))
        rows = prompts.tolist()
        rate = {}
        with torch.inference_mode():
            rate["cache"] = b * new / _timed(lambda rows=rows: generate(loaded.model, rows, s))
            rate["none"] = b * new / _timed(lambda rows=rows: generate(loaded.model, rows, s, use_cache=False),
                                            repeats=1)
            rate["int8"] = b * new / _timed(lambda rows=rows: generate(q, rows, s))
            rate["hf"] = b * new / _timed(lambda p=prompts: hf.generate(p, max_new_tokens=new, min_new_tokens=new,
                                                                         do_sample=False, eos_token_id=None,
                                                                         pad_token_id=0))
        print(f"{b:>5} {rate['cache']:>11,.0f} {rate['none']:>9,.0f} {rate['int8']:>11,.0f} {rate['hf']:>12,.0f}   "
              f"{rate['cache'] / rate['none']:>9.2f}x {rate['cache'] / rate['hf']:>7.2f}x "
              f"{rate['int8'] / rate['cache']:>8.2f}x")
    print("(new tokens per second, all rows together)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,small")
    p.add_argument("--checkpoint", help="a trained checkpoint instead of random presets")
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    if args.checkpoint:
        bench_model(Path(args.checkpoint), args.checkpoint, args.new, args.prompt_len, batches)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.presets.split(","):
            context = max(preset(name).context, args.prompt_len + args.new + 1)
            bench_model(_checkpoint(name, context, Path(tmp) / name), name, args.new, args.prompt_len, batches)


if __name__ == "__main__":
    main()
