"""Training-step throughput: our GPT against transformers' LlamaForCausalLM at the same
configuration and precision, in the same process, with MFU against a matmul peak measured
in the same interleaved rounds.

    python -m bench.bench_train [--presets tiny,small] [--rounds 5] [--steps 1] [--batch B]
                                [--seq T] [--dtypes fp32,bf16] [--compile] [--peak-n 1024]
                                [--peak-reps N]

A step is forward + backward + AdamW on random tokens of the preset's vocabulary (the
tokens do not change the cost). Both models get the same weights. FLOPs per token are
6 x (parameters in matmuls) + 12 x layers x width x T (attention scores), the usual
estimate (PaLM appendix B).

Timing (bench.common.interleaved): per preset and dtype, every round runs each case once
in a rotating order: ours, transformers' Llama (and torch.compile of ours with --compile),
and the peak: a fixed square matmul at the same precision whose FLOP count is known
(2 n^3 per product, repeated to last about as long as a training call). MFU of a round
is the model FLOP/s achieved in that round divided by the matmul FLOP/s measured in that
same round, so a slow spell of this shared machine lowers both and MFU is never set
against a peak measured at another time (run once before the models, under other load,
the peak read 49 GFLOP/s against 180 when quiet, and MFU came out above 100%). A load
that changes within a round can still push that round's MFU past 100%: such rounds are
flagged, and the median over rounds is the figure to quote.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from bench.common import Spread, interleaved
from model.core.config import ModelConfig, preset
from model.core.flops import flops_per_token
from model.core.gpt import GPT

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def hf_llama(cfg: ModelConfig, ours: GPT) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, attn_implementation="eager"))
    hf.load_state_dict(ours.state_dict(), strict=False)
    return hf


def train_case(model: torch.nn.Module, params: torch.nn.Module, x: torch.Tensor, dtype: str, hf: bool,
               steps: int):
    """`steps` training steps of `model` (its own AdamW, made here, outside the clock).
    `params` is the module that owns the parameters (the compiled wrapper shares ours')."""
    opt = torch.optim.AdamW(params.parameters(), lr=1e-4)

    def run() -> None:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                if hf:
                    loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss  # shifts the labels itself
                else:
                    _, loss = model(x[:, :-1], x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return run


def peak_case(dtype: str, n: int, reps: int):
    """(call, FLOPs per call): `reps` products of two n x n matrices at this precision."""
    a = torch.randn(n, n, dtype=DTYPES[dtype])
    b = torch.randn(n, n, dtype=DTYPES[dtype])

    def run() -> None:
        for _ in range(reps):
            a @ b

    return run, 2 * n**3 * reps


def calibrate(train: Callable[[], None], dtype: str, n: int) -> int:
    """Matmuls per peak call so that the call lasts about as long as a training call: the
    peak then samples the machine's load over a window as long as the one it is set against."""
    one, _ = peak_case(dtype, n, 1)
    train(), one()  # first calls: allocation, AdamW state, kernel selection
    # the fastest of a few calls of each: a spike in one of them would skew the ratio
    t_train = min(_timed(train) for _ in range(2))
    t_one = min(_timed(one) for _ in range(5))
    return max(1, round(t_train / t_one))


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_config(name: str, dtype: str, args: argparse.Namespace) -> dict[str, Spread]:
    cfg = preset(name)
    torch.manual_seed(0)
    ours = GPT(cfg)
    theirs = hf_llama(cfg, ours)
    x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1))
    tokens = args.batch * args.seq * args.steps  # per call of a training case
    model_flops = tokens * flops_per_token(cfg, args.seq)
    cases = {"yunque": train_case(ours, ours, x, dtype, hf=False, steps=args.steps),
             "transformers": train_case(theirs, theirs, x, dtype, hf=True, steps=args.steps)}
    reps = args.peak_reps or calibrate(cases["yunque"], dtype, args.peak_n)
    peak, peak_flops = peak_case(dtype, args.peak_n, reps)
    if args.compile:
        cases["yunque_compile"] = train_case(torch.compile(ours), ours, x, dtype, hf=False, steps=args.steps)
    cases["peak"] = peak
    # warm-up calls (calibrate() warmed ours): allocator, AdamW state; two with --compile,
    # whose second call can still recompile (guards on grad mode, AdamW's state)
    rounds = interleaved(cases, args.rounds, warmup=2 if args.compile else 1)
    models = [c for c in cases if c != "peak"]
    print(f"\n{name} ({cfg.num_params() / 1e6:.1f}M parameters), {dtype}, batch {args.batch} x {args.seq} tokens, "
          f"{args.steps} step(s) per call; peak: {reps} x {args.peak_n}^3 {dtype} matmul per call")
    rounds.report(baseline="transformers", unit="tokens/s", work={c: tokens for c in models},
                  compare=[c for c in models if c != "transformers"])
    # MFU per round: model FLOP/s of that round / matmul FLOP/s of that same round
    mfu = {c: [model_flops / t[c] / (peak_flops / t["peak"]) for t in rounds.times] for c in models}
    for r, t in enumerate(rounds.times):
        # above 100% is impossible: the machine's load changed between the calls of that round
        flag = "  (load changed within the round)" if max(mfu[c][r] for c in models) > 1 else ""
        print(f"  round {r + 1}: peak {peak_flops / t['peak'] / 1e9:.1f} GFLOP/s; MFU "
              + "  ".join(f"{c} {mfu[c][r]:.1%}" for c in models) + flag)
    out = {f"mfu {c}": Spread.of(mfu[c]) for c in models}
    out |= {f"{c} vs transformers": rounds.ratio(c, "transformers") for c in models if c != "transformers"}
    out["peak GFLOP/s"] = Spread.of([peak_flops / s / 1e9 for s in rounds.seconds("peak")])
    print(f"  peak: {out['peak GFLOP/s'].fmt('.1f', 'GFLOP/s')}")
    for c in models:
        print(f"  MFU {c}: {out[f'mfu {c}'].fmt('.1%', '')}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="tiny,small")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per preset and dtype")
    p.add_argument("--steps", type=int, default=1, help="training steps per case per round")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--compile", action="store_true", help="also time torch.compile of ours")
    p.add_argument("--peak-n", type=int, default=1024, help="side of the peak matmul")
    p.add_argument("--peak-reps", type=int, default=0,
                   help="matmuls per peak call (default 0: as many as last about one training call)")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.rounds} interleaved rounds "
          f"(ratios: transformers seconds / case seconds, > 1: faster than transformers)")
    summary = {(n, d): bench_config(n, d, args) for n in args.presets.split(",") for d in args.dtypes.split(",")}
    print("\nsummary (median over rounds, range)")
    for (n, d), res in summary.items():
        for key, s in res.items():
            spec, unit = (".1%", "") if key.startswith("mfu") else (".1f", "") if "GFLOP" in key else (".2f", "x")
            print(f"  {n:<6} {d:<5} {key:<32} {s.fmt(spec, unit)}")


if __name__ == "__main__":
    main()
