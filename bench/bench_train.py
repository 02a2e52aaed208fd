"""Training-step throughput: our GPT against transformers' LlamaForCausalLM in each of its
configurations (eager, SDPA, SDPA + torch.compile), at the same shapes, batch, precision,
threads and optimizer step, in interleaved rounds; the headline sets our fastest
configuration against transformers' FASTEST. MFU is against a matmul peak measured in the
same rounds on CPU, against the datasheet peak on a GPU (model.core.flops).

    python -m bench.bench_train [--device cpu|cuda] [--presets tiny,small] [--dtypes fp32,bf16]
        [--rounds 5] [--steps 1] [--batch B] [--seq T] [--threads N] [--no-compile]
        [--cases yunque,yunque_compile,hf_eager,hf_sdpa,hf_sdpa_compile] [--peak-n 1024]
        [--peak-reps N] [--quick]

The cases, the MFU method and the GPU defaults: docs/benchmarks.md#training-step-bench_train.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.common import Rounds, Spread, interleaved
from model.core import flops
from model.core.config import ModelConfig, preset
from model.core.flops import flops_per_token
from model.core.gpt import GPT

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Case:
    hf: bool
    compile: bool
    attn: str = ""  # transformers' attn_implementation


CASES = {
    "yunque": Case(hf=False, compile=False),
    "yunque_compile": Case(hf=False, compile=True),
    "hf_eager": Case(hf=True, compile=False, attn="eager"),
    "hf_sdpa": Case(hf=True, compile=False, attn="sdpa"),
    "hf_sdpa_compile": Case(hf=True, compile=True, attn="sdpa"),
    "hf_eager_compile": Case(hf=True, compile=True, attn="eager"),
}
DEFAULTS = {
    # device: presets, dtypes, batch, seq, steps, cases
    "cpu": ("tiny,small", "fp32,bf16", 8, 256, 1, "yunque,yunque_compile,hf_eager,hf_sdpa,hf_sdpa_compile"),
    "cuda": ("gpt2_125m", "bf16", 16, 1024, 10, "yunque,yunque_compile,hf_sdpa,hf_sdpa_compile"),
}
QUICK = {"cpu": ("tiny", "fp32", 2, 64, 1), "cuda": ("gpt2_125m", "bf16", 2, 256, 2)}


def hf_llama(cfg: ModelConfig, ours: GPT, attn: str) -> torch.nn.Module:
    """transformers' Llama at our config, with our weights, for training (no KV cache)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.context, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings, attn_implementation=attn,
        use_cache=False))
    hf.load_state_dict(ours.state_dict(), strict=True)
    return hf


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_case(model: torch.nn.Module, params: torch.nn.Module, x: torch.Tensor, dtype: str, hf: bool,
               steps: int) -> Callable[[], None]:
    """`steps` training steps of `model` (its own AdamW, made here, outside the clock).
    `params` is the module that owns the parameters (a compiled wrapper shares them)."""
    device = x.device
    opt = torch.optim.AdamW(params.parameters(), lr=1e-4, fused=device.type == "cuda")

    def run() -> None:
        for _ in range(steps):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
                if hf:
                    loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss  # shifts the labels itself
                else:
                    _, loss = model(x[:, :-1], x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        _sync(device)

    return run


def peak_case(dtype: str, n: int, reps: int, device: torch.device):
    """(call, FLOPs per call): `reps` products of two n x n matrices at this precision."""
    a = torch.randn(n, n, dtype=DTYPES[dtype], device=device)
    b = torch.randn(n, n, dtype=DTYPES[dtype], device=device)

    def run() -> None:
        for _ in range(reps):
            a @ b
        _sync(device)

    return run, 2 * n**3 * reps


def calibrate(train: Callable[[], None], dtype: str, n: int, device: torch.device) -> int:
    """Matmuls per peak call so that the call lasts about as long as a training call: the
    peak then samples the machine's load over a window as long as the one it is set against."""
    one, _ = peak_case(dtype, n, 1, device)
    train(), one()  # first calls: allocation, AdamW state, kernel selection
    # the fastest of a few calls of each: a spike in one of them would skew the ratio
    t_train = min(_timed(train) for _ in range(2))
    t_one = min(_timed(one) for _ in range(5))
    return max(1, round(t_train / t_one))


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def build_cases(cfg: ModelConfig, names: list[str], x: torch.Tensor, dtype: str, steps: int,
                ) -> dict[str, Callable[[], None]]:
    """One training call per case name, all from the same weights (ours, seeded)."""
    torch.manual_seed(0)
    ours = GPT(cfg)
    hf_models = {attn: hf_llama(cfg, ours, attn).to(x.device)
                 for attn in sorted({CASES[n].attn for n in names if CASES[n].hf})}
    ours.to(x.device)
    with torch.no_grad():  # same model: same logits (fp32, before any step)
        ref = ours(x[:1, :-1])[0]
        for attn, m in hf_models.items():
            diff = (m(input_ids=x[:1, :-1]).logits - ref).abs().max().item()
            if diff > 1e-3 * max(1.0, ref.abs().max().item()):
                raise SystemExit(f"transformers' Llama ({attn}) gives other logits than ours: max |diff| {diff:.2e}")
    out = {}
    for name in names:
        c = CASES[name]
        base = hf_models[c.attn] if c.hf else ours
        out[name] = train_case(torch.compile(base) if c.compile else base, base, x, dtype, c.hf, steps)
    return out


def bench_config(name: str, dtype: str, args: argparse.Namespace) -> dict[str, Spread]:
    device = torch.device(args.device)
    cfg = preset(name)
    x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), device=device)
    tokens = args.batch * args.seq * args.steps  # per call of a training case
    model_flops = tokens * flops_per_token(cfg, args.seq)
    names = args.case_names
    torch._dynamo.reset()  # compiled code of the previous preset and dtype: out of the recompile limit's way
    cases = build_cases(cfg, names, x, dtype, args.steps)
    ours = [n for n in names if not CASES[n].hf]
    theirs = [n for n in names if CASES[n].hf]
    if device.type == "cpu":
        reps = args.peak_reps or calibrate(cases[names[0]], dtype, args.peak_n, device)
        cases["peak"], peak_flops = peak_case(dtype, args.peak_n, reps, device)
        peak_note = f"peak: {reps} x {args.peak_n}^3 {dtype} matmul per call, in the rotation"
    else:
        peak, source = flops.peak_flops(device, dtype)
        measured = flops.matmul_peak(DTYPES[dtype], n=8192, device=str(device))
        peak_note = (f"peak: {peak / 1e12:.0f} TFLOP/s ({source}); a measured {dtype} 8192^3 matmul: "
                     f"{measured / 1e12:.0f} TFLOP/s")
    # warm-up: allocator, AdamW state, compilation; two calls, as a compiled case's second
    # call can still recompile (guards on grad mode, AdamW's state)
    rounds = interleaved(cases, args.rounds, warmup=2 if any(CASES[n].compile for n in names) else 1)
    print(f"\n{name} ({cfg.num_params() / 1e6:.1f}M parameters), {dtype}, {device.type}, batch {args.batch} x "
          f"{args.seq} tokens, {args.steps} step(s) per call, {torch.get_num_threads()} torch threads; {peak_note}")
    best_hf = rounds.fastest(theirs) if theirs else None
    best_ours = rounds.fastest(ours) if ours else None
    if best_hf:
        rounds.report(baseline=best_hf, unit="tokens/s", work={c: tokens for c in names}, compare=[])
    out: dict[str, Spread] = {}
    if best_hf and best_ours:
        print(f"  fastest transformers configuration measured: {best_hf}; our fastest: {best_ours}")
        out[f"HEADLINE {best_ours} vs {best_hf}"] = rounds.versus(
            best_ours, best_hf, f"HEADLINE {best_ours} vs {best_hf} (fastest transformers)")
        eager_hf = [n for n in theirs if not CASES[n].compile]
        if "yunque" in ours and eager_hf and best_ours != "yunque":
            fastest_eager = rounds.fastest(eager_hf)
            out[f"yunque vs {fastest_eager}"] = rounds.versus(
                "yunque", fastest_eager, f"uncompiled: yunque vs {fastest_eager} (fastest uncompiled transformers)")
        print("  every pair (median, range):")
        for o in ours:
            cells = []
            for t in theirs:
                s = rounds.ratio(o, t)
                cells.append(f"vs {t} {s.median:.2f}x ({s.lo:.2f}-{s.hi:.2f})")
            print(f"    {o}: " + "  ".join(cells))
    if device.type == "cpu":
        out |= mfu(rounds, names, model_flops, peak_call=peak_flops)
    else:
        out |= mfu(rounds, names, model_flops, datasheet=peak)
    return out


def mfu(rounds: Rounds, names: list[str], model_flops: float, peak_call: float = 0.0,
        datasheet: float = 0.0) -> dict[str, Spread]:
    """MFU per case and round: against the datasheet peak if given, else against the
    "peak" case of the same round (`peak_call` FLOPs per call)."""
    if datasheet:
        per = {c: [model_flops / t[c] / datasheet for t in rounds.times] for c in names}
    else:
        per = {c: [model_flops / t[c] / (peak_call / t["peak"]) for t in rounds.times] for c in names}
        for r, t in enumerate(rounds.times):
            # above 100% is impossible: the machine's load changed between the calls of that round
            flag = "  (load changed within the round)" if max(per[c][r] for c in names) > 1 else ""
            print(f"  round {r + 1}: peak {peak_call / t['peak'] / 1e9:.1f} GFLOP/s; MFU "
                  + "  ".join(f"{c} {per[c][r]:.1%}" for c in names) + flag)
    out = {f"mfu {c}": Spread.of(per[c]) for c in names}
    if not datasheet:
        out["peak GFLOP/s"] = Spread.of([peak_call / s / 1e9 for s in rounds.seconds("peak")])
        print(f"  peak: {out['peak GFLOP/s'].fmt('.1f', 'GFLOP/s')}")
    for c in names:
        print(f"  MFU {c}: {out[f'mfu {c}'].fmt('.1%', '')}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--presets", default=None, help="default: tiny,small on CPU, gpt2_125m on a GPU")
    p.add_argument("--dtypes", default=None, help="default: fp32,bf16 on CPU, bf16 on a GPU")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per preset and dtype (default 5)")
    p.add_argument("--steps", type=int, default=None, help="training steps per case per call (1 CPU, 10 GPU)")
    p.add_argument("--batch", type=int, default=None, help="default: 8 on CPU, 16 on a GPU")
    p.add_argument("--seq", type=int, default=None, help="default: 256 on CPU, 1024 on a GPU")
    p.add_argument("--threads", type=int, default=0, help="torch threads, every case (default: torch's)")
    p.add_argument("--cases", default=None, help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled cases (a faster run)")
    p.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)  # compiled cases now run by default
    p.add_argument("--quick", action="store_true", help="a check that it runs end to end (see below)")
    p.add_argument("--peak-n", type=int, default=1024, help="side of the CPU peak matmul")
    p.add_argument("--peak-reps", type=int, default=0,
                   help="matmuls per CPU peak call (default 0: as many as last about one training call)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_train --device cuda: torch sees no GPU here; skipped")
        return 0
    presets, dtypes, batch, seq, steps, cases = DEFAULTS[args.device]
    if args.quick:
        presets, dtypes, batch, seq, steps = QUICK[args.device]
    args.presets, args.dtypes = args.presets or presets, args.dtypes or dtypes
    args.batch, args.seq, args.steps = args.batch or batch, args.seq or seq, args.steps or steps
    args.rounds = args.rounds or (2 if args.quick else 5)
    names = (args.cases or cases).split(",")
    if unknown := [n for n in names if n not in CASES]:
        p.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    args.case_names = [n for n in names if not (args.no_compile and CASES[n].compile)]
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; {args.rounds} "
          f"interleaved rounds; cases {', '.join(args.case_names)} (ratios: other seconds / our seconds, > 1: ours faster)")
    summary = {(n, d): bench_config(n, d, args) for n in args.presets.split(",") for d in args.dtypes.split(",")}
    print("\nsummary (median over rounds, range)")
    for (n, d), res in summary.items():
        for key, s in res.items():
            spec, unit = (".1%", "") if key.startswith("mfu") else (".1f", "") if "GFLOP" in key else (".2f", "x")
            print(f"  {n:<9} {d:<5} {key:<58} {s.fmt(spec, unit)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
