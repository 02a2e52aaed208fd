"""Generation throughput: our decoder with and without the KV cache, int8 weights, and
transformers' `generate` on the exported model, in the same process, greedy, the same
number of new tokens for all (no stop tokens).

    python -m bench.bench_generate [--presets tiny,small] [--checkpoint DIR] [--new 256]
                                   [--prompt-len 32] [--batches 1,8] [--threads 2] [--repeats 5]

Random weights unless --checkpoint is given (the cost does not depend on them) at the
presets' vocabulary sizes (tiny 4,096, small 32,000); their context is raised where
needed to fit prompt + new tokens.
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


def _best_times(fns: dict, repeats: int) -> dict[str, float]:
    """Best wall time of each function over `repeats` rounds, the functions interleaved
    within each round, so that a slow spell of a shared machine hits all of them alike."""
    for fn in fns.values():
        fn()  # warm-up: allocator, kernels
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _checkpoint(name: str, context: int, root: Path) -> Path:
    """A random model of the preset, at the preset's vocabulary size, saved with a
    tokenizer as training saves it. The small generated tokenizer is padded with unused
    added tokens to that size, so the output layer costs what it costs in a real run."""
    from tokenizers import AddedToken, Tokenizer

    from tests.factory import tokenizer_dir

    cfg = dataclasses.replace(preset(name), context=context)
    directory = tokenizer_dir(root)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.add_tokens([AddedToken(f"<|unused_{i}|>", special=True) for i in range(cfg.vocab_size - tok.get_vocab_size())])
    tok.save(str(directory / "tokenizer.json"))
    model = GPT(cfg)
    return ckpt.save(root / name, 1, model.state_dict(), {}, {"model_config": dataclasses.asdict(cfg)},
                     tied=cfg.tie_embeddings, tokenizer=directory).path


def bench_model(path: Path, label: str, new: int, prompt_len: int, batches: list[int], repeats: int) -> None:
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
        with torch.inference_mode():
            fast = _best_times({
                "cache": lambda rows=rows: generate(loaded.model, rows, s),
                "int8": lambda rows=rows: generate(q, rows, s),
                "hf": lambda p=prompts: hf.generate(p, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                                    eos_token_id=None, pad_token_id=0),
            }, repeats)
            # the uncached reference is slow and its cost is not in doubt: one timed run
            slow = _best_times({"none": lambda rows=rows: generate(loaded.model, rows, s, use_cache=False)}, 1)
        rate = {k: b * new / v for k, v in {**fast, **slow}.items()}
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
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds; the best of each is kept")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    if args.checkpoint:
        bench_model(Path(args.checkpoint), args.checkpoint, args.new, args.prompt_len, batches, args.repeats)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.presets.split(","):
            context = max(preset(name).context, args.prompt_len + args.new + 1)
            bench_model(_checkpoint(name, context, Path(tmp) / name), name, args.new, args.prompt_len, batches,
                        args.repeats)


if __name__ == "__main__":
    main()
