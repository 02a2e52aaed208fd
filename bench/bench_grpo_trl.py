"""One GRPO step (rollouts, rewards, reference log-probs, one policy update) of ours
(model/post/rl.py's GRPO stage, called as model/post/train.py calls it) against Hugging
Face TRL's GRPOTrainer, on CPU, in one process.

    python -m bench.bench_grpo_trl [--checkpoint DIR] [--prompts 8] [--group 8] [--max-new-tokens 80]
                                   [--temperature 0.7] [--lr 3e-5] [--rounds 5] [--threads 2]

Both sides start from the same weights (default $YUNQUE_HOME/data/sft_model) with the same
prompts, sampling, reward and update, and run one step each per interleaved round. What is
held equal and how a step is timed: docs/benchmarks.md#one-grpo-step-against-trl-bench_grpo_trl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from bench import common  # telemetry switches; yunque_home
from bench.common import Rounds, Spread


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=os.path.join(common.yunque_home(), "data", "sft_model"))
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=8, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=80)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient")
    p.add_argument("--rounds", "--steps", dest="rounds", type=int, default=5,
                   help="interleaved rounds (one measured step of each), after one warm-up step")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-uniform-groups", action="store_true",
                   help="ours leaves groups without a learning signal out of the update (its default in "
                        "training); off here by default so that both sides train on every completion")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    import transformers
    from datasets import Dataset
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from model.checkpoint.load import load
    from model.core import parallel
    from model.export.hf import export_hf
    from model.post.config import GRPOConfig
    from model.post.rl import GRPO, verifiable_reward
    from model.post.train import build_optimizer
    from pipelines.tasks.math_tasks import prompt_for, spanish_problems

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # TRL's config still spells it gradient_checkpointing, which transformers 5 renamed
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
    problems = spanish_problems(args.prompts, "train", "add2", args.seed)
    cfg = GRPOConfig(steps=args.rounds + 1, batch_size=args.prompts, group=args.group,
                     max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=0, iterations=1,
                     kl_coef=args.beta, clip=0.2, lr=args.lr, weight_decay=0.0, grad_clip=1.0, dtype="fp32",
                     seed=args.seed, examples=args.prompts, dev_problems=0,
                     skip_uniform_groups=args.skip_uniform_groups)

    # --- ours: the stage as model/post/train.py builds and drives it, on CPU
    loaded = load(args.checkpoint)
    loaded.model.train()
    stage = GRPO(cfg, loaded, parallel.Dist(), {"data": ""}, lambda **_: None)
    stage.problems = problems  # the bench's prompts; one step's batch is all of them
    opt = build_optimizer(stage.module, cfg, fused=False)

    def update(loss: torch.Tensor) -> float:
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(stage.module.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(norm)

    ours: list[dict] = []

    def ours_step(step: int) -> None:
        t0 = time.perf_counter()
        m = stage.step(step, update)
        ours.append({"s": time.perf_counter() - t0, "tokens": m["reply_tokens"] * args.prompts * args.group,
                     "length": m["reply_tokens"], "reward": m["reward_verifiable"], "stopped": m["stopped"],
                     "signal": m["groups_with_signal"]})

    # --- TRL: the same checkpoint through our transformers export
    tmp = tempfile.TemporaryDirectory()
    export = Path(tmp.name) / "hf"
    export_hf(loaded, export, "float32", ())
    hf_tok = transformers.AutoTokenizer.from_pretrained(export)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    same_ids = all(hf_tok.apply_chat_template(prompt_for(q), add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"] == loaded.tokenizer.encode_chat(prompt_for(q))
                   for q in problems)
    stop_ids = sorted(set(hf_model.generation_config.eos_token_id) | {hf_tok.eos_token_id})
    assert stop_ids == sorted(loaded.tokenizer.stop_ids), (stop_ids, loaded.tokenizer.stop_ids)

    trl_calls: list[dict] = []

    def reward(prompts, completions, completion_ids, answer, **_) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [verifiable_reward(t, a, cfg)[0] for t, a in zip(texts, answer)]
        trl_calls.append({"t": time.perf_counter(), "lengths": [len(c) for c in completion_ids],
                          "reward": sum(rewards) / len(rewards),
                          "stopped": sum(bool(c) and c[-1] in stop_ids for c in completion_ids) / len(completion_ids)})
        return rewards

    trl_args = TRLConfig(
        output_dir=str(Path(tmp.name) / "trl"), use_cpu=True, bf16=False, fp16=False, seed=args.seed,
        per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=args.temperature,
        top_k=0, top_p=1.0, beta=args.beta, num_iterations=1, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=cfg.betas[0], adam_beta2=cfg.betas[1], weight_decay=0.0, max_grad_norm=cfg.grad_clip,
        gradient_checkpointing=False, disable_dropout=True, use_vllm=False, max_steps=args.rounds + 1,
        report_to="none", logging_strategy="no", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    assert trl_args.steps_per_generation == 1 and trl_args.generation_batch_size == args.prompts * args.group

    trl_steps: list[tuple[float, float]] = []

    orders: list[list[str]] = []

    class Interleave(transformers.TrainerCallback):
        """Times TRL's steps and runs one of ours beside each, outside TRL's window: after
        it on even steps, before it on odd ones, so that neither side always goes first."""

        def on_step_begin(self, a, state, control, **kw):
            k = len(trl_steps)
            orders.append(["ours", "trl"] if k % 2 else ["trl", "ours"])
            if k % 2:
                ours_step(k)
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            trl_steps.append((self.t0, time.perf_counter()))
            if len(trl_steps) % 2:  # step k = len - 1 is even
                ours_step(len(trl_steps) - 1)

    dataset = Dataset.from_list([{"prompt": prompt_for(q), "answer": float(q.answer)} for q in problems])
    trainer = GRPOTrainer(model=hf_model, reward_funcs=[reward], args=trl_args, train_dataset=dataset,
                          processing_class=hf_tok, callbacks=[Interleave()])
    trainer.remove_callback(transformers.PrinterCallback)  # its end-of-training metrics line
    assert not trainer.model.is_activation_checkpointing, "TRL would recompute activations: not what ours does"
    trainer.train()
    tmp.cleanup()

    # generation (the reward follows it) ran inside each timed TRL step, once per step
    assert len(trl_calls) == len(trl_steps) == len(ours) == args.rounds + 1, (len(trl_calls), len(trl_steps))
    assert all(t0 < c["t"] < t1 for c, (t0, t1) in zip(trl_calls, trl_steps))
    theirs = [{"s": t1 - t0, "tokens": sum(c["lengths"]), "length": sum(c["lengths"]) / len(c["lengths"]),
               "reward": c["reward"], "stopped": c["stopped"]} for c, (t0, t1) in zip(trl_calls, trl_steps)]
    ours_m, trl_m = ours[1:], theirs[1:]  # step 0: warm-up
    rounds = Rounds(times=[{"ours": o["s"], "trl": t["s"]} for o, t in zip(ours_m, trl_m)], orders=orders[1:])

    def row(name: str, a: str, b: str, r: str = "") -> None:
        print(f"| {name} | {a} | {b} | {r} |")

    secs = {k: Spread.of([m["s"] for m in ms]) for k, ms in {"ours": ours_m, "trl": trl_m}.items()}
    rate = {k: Spread.of([m["tokens"] / m["s"] for m in ms]) for k, ms in {"ours": ours_m, "trl": trl_m}.items()}
    rate_ratio = Spread.of([o["tokens"] / o["s"] / (t["tokens"] / t["s"]) for o, t in zip(ours_m, trl_m)])
    mean = {k: statistics.mean(m["length"] for m in ms) for k, ms in {"ours": ours_m, "trl": trl_m}.items()}
    print(f"\n{args.checkpoint}: {loaded.model.num_params() / 1e6:.2f}M parameters, "
          f"{loaded.config.n_layers} layers x {loaded.config.dim}; {args.prompts} prompts x {args.group} completions, "
          f"max {args.max_new_tokens} new tokens, temperature {args.temperature}, beta {args.beta}, lr {args.lr}, fp32; "
          f"torch threads {torch.get_num_threads()}; transformers {transformers.__version__}, "
          f"trl {__import__('trl').__version__}; prompt ids identical: {same_ids}")
    print(f"one warm-up step, then {args.rounds} interleaved rounds (one step of each, rotating which goes first)")
    rounds.report("trl", title="per round, seconds per step (ratio: TRL seconds / ours seconds, > 1: ours faster):")
    print(f"  completion tokens/s, ours vs TRL: {rate_ratio.fmt()}\n")
    row("per step (median over rounds, range)", "ours", "TRL", "ours vs TRL (per-round ratio)")
    print("|---|---:|---:|---:|")
    row("seconds", f"{secs['ours'].median:.3f} ({secs['ours'].lo:.3f}-{secs['ours'].hi:.3f})",
        f"{secs['trl'].median:.3f} ({secs['trl'].lo:.3f}-{secs['trl'].hi:.3f})", rounds.ratio("ours", "trl").fmt())
    row("completion tokens/s", f"{rate['ours'].median:,.0f} ({rate['ours'].lo:,.0f}-{rate['ours'].hi:,.0f})",
        f"{rate['trl'].median:,.0f} ({rate['trl'].lo:,.0f}-{rate['trl'].hi:,.0f})", rate_ratio.fmt())
    row("mean completion length (tokens)", f"{mean['ours']:.1f}", f"{mean['trl']:.1f}")
    for name, key in (("mean reward", "reward"), ("fraction stopped", "stopped")):
        row(name, f"{statistics.mean(m[key] for m in ours_m):.3f}", f"{statistics.mean(m[key] for m in trl_m):.3f}")
    print(f"\n{statistics.mean(m['signal'] for m in ours_m):.2f} of our groups had a learning signal; ours "
          + ("trained on those only (--skip-uniform-groups)" if args.skip_uniform_groups else
             "trained on every completion, as TRL does"))

if __name__ == "__main__":
    main()
