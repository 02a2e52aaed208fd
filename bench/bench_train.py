"""Training-step throughput: our GPT against transformers' LlamaForCausalLM at the same
configuration and precision, in the same process, with MFU against this machine's
measured matmul peak.

    python -m bench.bench_train [--presets tiny,small] [--steps N] [--batch B] [--seq T]
                                [--dtypes fp32,bf16] [--compile]

A step is forward + backward + AdamW on random tokens of the preset's vocabulary (the
tokens do not change the cost). Both models get the same weights. FLOPs per token are
6 x (parameters in matmuls) + 12 x layers x width x T (attention scores), the usual
estimate (PaLM appendix B).
"""

from __future__ import annotations

import argparse
import time

import torch

from bench import common  # noqa: F401 - telemetry switches
from model.config import preset
from model.flops import flops_per_token, matmul_peak
from model.gpt import GPT


def hf_llama(cfg, ours: GPT):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, attn_implementation="eager"))
    hf.load_state_dict(ours.state_dict(), strict=False)
    return hf


def make_step(model, x: torch.Tensor, autocast, hf: bool):
    def step(opt: torch.optim.Optimizer) -> None:
        with autocast:
            if hf:
                loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss  # shifts the labels itself
            else:
                _, loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(model, step_fn, steps: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(2):  # warm-up (and compilation)
        step_fn(opt)
    t0 = time.perf_counter()
    for _ in range(steps):
        step_fn(opt)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="tiny,small")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--compile", action="store_true", help="also time torch.compile of ours")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    peaks = {d: matmul_peak(torch.float32 if d == "fp32" else torch.bfloat16) for d in args.dtypes.split(",")}
    print("matmul peak: " + ", ".join(f"{d} {v / 1e9:.0f} GFLOP/s" for d, v in peaks.items()))
    print(f"{'preset':<8} {'params':>8} {'dtype':<5} {'model':<22} {'tokens/s':>9} {'MFU':>6}")
    for name in args.presets.split(","):
        cfg = preset(name)
        torch.manual_seed(0)
        ours = GPT(cfg)
        theirs = hf_llama(cfg, ours)
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1))
        tokens = args.batch * args.seq
        fpt = flops_per_token(cfg, args.seq)
        for dtype in args.dtypes.split(","):
            autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")

            rows = [("yunque GPT (eager)", time_steps(ours, make_step(ours, x, autocast, hf=False), args.steps)),
                    ("transformers Llama", time_steps(theirs, make_step(theirs, x, autocast, hf=True), args.steps))]
            if args.compile:
                step = make_step(torch.compile(ours), x, autocast, hf=False)
                rows.insert(1, ("yunque GPT (compile)", time_steps(ours, step, args.steps)))
            for label, sec in rows:
                tps = tokens / sec
                print(f"{name:<8} {cfg.num_params() / 1e6:>7.1f}M {dtype:<5} {label:<22} {tps:>9,.0f} "
                      f"{tps * fpt / peaks[dtype]:>6.1%}")
            best = min(sec for label, sec in rows if label.startswith("yunque"))
            print(f"{'':<8} {'':>8} {dtype:<5} ratio yunque / transformers: {rows[-1][1] / best:.2f}x")


if __name__ == "__main__":
    main()
