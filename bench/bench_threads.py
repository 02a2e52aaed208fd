"""`yunque serve`'s default thread count (every core but one) against llama.cpp's usual
setting (every core), on an idle machine and beside a busy neighbour (one process spinning
on one core, as a training step, the Dagster daemon or a browser would): new tokens per
second of one greedy reply, and its slowest round.

    python -m bench.bench_threads [--home H] [--export DIR] [--quant q8_0] [--new 64] [--rounds 9]

The model is the home's export (data/exported_model, the main command's) unless --export
is given. Both settings load the same GGUF file in llama-cpp-python, in this process; the
end tokens are banned so every reply is exactly --new tokens. The four cases run in
interleaved rounds (bench.common.interleaved); the ratios are taken within a round.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path
from typing import Self

from bench.common import Clocked, Spread, interleaved, yunque_home

PROMPT = "Para instalar un paquete en Debian"


def _spin(stop) -> None:
    while not stop.is_set():
        pass


class Neighbour:
    """A process that keeps one core busy while it runs."""

    def __enter__(self) -> Self:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.proc = ctx.Process(target=_spin, args=(self.stop,), daemon=True)
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(10)


def main() -> None:
    import llama_cpp

    from serving.app import default_threads

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--home", default=None)
    p.add_argument("--export", help="an export directory (default: the home's data/exported_model)")
    p.add_argument("--quant", default="q8_0")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    export = Path(args.export or Path(args.home or yunque_home()) / "data" / "exported_model")
    gguf = export / f"model-{args.quant}.gguf"
    cores = len(os.sched_getaffinity(0))
    ours, every = default_threads(), cores
    models = {n: llama_cpp.Llama(model_path=str(gguf), n_ctx=512, n_threads=n, n_threads_batch=n, verbose=False)
              for n in {ours, every}}
    ban = {models[ours].token_eos(): -100.0}

    def reply(n: int):
        def run() -> str:
            out = models[n].create_completion(PROMPT, max_tokens=args.new, temperature=0.0, logit_bias=ban)
            assert out["usage"]["completion_tokens"] == args.new, out["usage"]
            return out["choices"][0]["text"]
        return run

    def busy(n: int):
        def run() -> Clocked:
            with Neighbour():
                time.sleep(0.3)  # the neighbour spinning before the clock starts
                t0 = time.perf_counter()
                text = reply(n)()
                return Clocked(time.perf_counter() - t0, text)
        return run

    print(f"{gguf}: {args.new} new tokens, greedy, {cores} cores; ours = {ours} thread(s), every core = {every}")
    cases = {f"ours ({ours}) idle": reply(ours), f"every core ({every}) idle": reply(every),
             f"ours ({ours}) busy": busy(ours), f"every core ({every}) busy": busy(every)}
    rounds = interleaved(cases, args.rounds)
    names = list(cases)
    rounds.report(names[1], unit="tokens/s", work=args.new, compare=[names[0]],
                  title="per round (busy cases: the generation only, the neighbour already spinning)")
    for label, o, e in (("idle", names[0], names[1]), ("beside a busy neighbour", names[2], names[3])):
        rounds.versus(o, e, f"{label}: ours vs every core")
        for c in (o, e):
            secs = rounds.seconds(c)
            print(f"    {c}: {Spread.of([args.new / t for t in secs]).fmt(',.0f', 'tokens/s')}; "
                  f"slowest reply {max(secs):.2f} s")


if __name__ == "__main__":
    main()
