"""Generation throughput: our decoder with and without the KV cache, int8 weights, and
transformers' `generate` on the exported model, in the same process, greedy, the same
number of new tokens for all (no stop tokens).

    python -m bench.bench_generate [--presets tiny,small] [--checkpoint DIR] [--new 256]
                                   [--prompt-len 32] [--batches 1,8] [--threads 2] [--rounds 5]
                                   [--uncached]

Random weights unless --checkpoint (the cost does not depend on them); --uncached adds one
round without the KV cache, an ablation. docs/benchmarks.md#generation-bench_generate.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch

from bench.common import Spread, interleaved  # and the telemetry switches
from model.checkpoint import state as ckpt
from model.core.config import preset
from model.core.generate import Sampling, generate
from model.core.gpt import GPT
from model.export.quantize import quantize_int8, weight_bytes


def _checkpoint(name: str, context: int, root: Path) -> Path:
    """A random model of the preset, at the preset's vocabulary size, saved with a
    tokenizer as training saves it. The small generated tokenizer is padded with unused
    added tokens to that size, so the output layer costs what it costs in a real run."""
    from tokenizers import AddedToken, Tokenizer

    from bench.common import small_tokenizer

    cfg = dataclasses.replace(preset(name), context=context)
    directory = small_tokenizer(root)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.add_tokens([AddedToken(f"<|unused_{i}|>", special=True) for i in range(cfg.vocab_size - tok.get_vocab_size())])
    tok.save(str(directory / "tokenizer.json"))
    model = GPT(cfg)
    return ckpt.save(root / name, 1, model.state_dict(), {}, {"model_config": dataclasses.asdict(cfg)},
                     tied=cfg.tie_embeddings, tokenizer=directory).path


def bench_model(path: Path, label: str, new: int, prompt_len: int, batches: list[int], rounds: int,
                uncached: bool) -> None:
    import transformers

    from model.checkpoint.load import load
    from model.export.hf import export_hf

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
    s = Sampling(max_new_tokens=new)
    for b in batches:
        prompts = torch.randint(16, cfg.vocab_size, (b, prompt_len), generator=torch.Generator().manual_seed(b))
        rows = prompts.tolist()
        with torch.inference_mode():
            r = interleaved({
                "ours": lambda rows=rows: generate(loaded.model, rows, s),
                "ours_int8": lambda rows=rows: generate(q, rows, s),
                "hf": lambda p=prompts: hf.generate(p, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                                    eos_token_id=None, pad_token_id=0),
            }, rounds)
        r.report(baseline="hf", unit="new tokens/s", work=b * new,
                 title=f" batch {b} ({rounds} interleaved rounds; ratios: hf seconds / ours seconds):")
        print(f"  ours_int8 vs ours (fp32): {Spread.of(r.ratios('ours_int8', 'ours')).fmt()}")
        if uncached:
            # An ablation of ours, not a peer, and tens of times slower (minutes per call for
            # small at batch 8 on 2 cores): one round beside the cached path, for its order of magnitude.
            with torch.inference_mode():
                slow = interleaved({
                    "ours": lambda rows=rows: generate(loaded.model, rows, s),
                    "ours_no_cache": lambda rows=rows: generate(loaded.model, rows, s, use_cache=False),
                }, 1, warmup=0)
            print(f"  ours (KV cache) vs ours_no_cache, one round: {slow.ratios('ours', 'ours_no_cache')[0]:.2f}x "
                  f"({b * new / slow.seconds('ours_no_cache')[0]:,.0f} new tokens/s without the cache)")
    print("(new tokens per second, all rows together)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="tiny,small")
    p.add_argument("--checkpoint", help="a trained checkpoint instead of random presets")
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", "--repeats", dest="rounds", type=int, default=5,
                   help="interleaved rounds (ours, ours int8, transformers, rotating)")
    p.add_argument("--uncached", action="store_true",
                   help="also time ours without the KV cache, once per batch (slow: minutes for small)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    if args.checkpoint:
        bench_model(Path(args.checkpoint), args.checkpoint, args.new, args.prompt_len, batches, args.rounds,
                    args.uncached)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.presets.split(","):
            context = max(preset(name).context, args.prompt_len + args.new + 1)
            bench_model(_checkpoint(name, context, Path(tmp) / name), name, args.new, args.prompt_len, batches,
                        args.rounds, args.uncached)


if __name__ == "__main__":
    main()
