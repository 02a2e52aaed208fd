"""The pretraining program: `torchrun [...] -m model.pretrain.train --config run.json` (or plain
`python -m model.pretrain.train` for one process).

DDP or FSDP2 when WORLD_SIZE > 1 (gloo on CPU, NCCL on GPU); AdamW (fused on CUDA) or
Muon; warmup + cosine or warmup-stable-decay; gradient clipping; accumulation to a
target tokens per step; bf16 autocast; optional torch.compile; periodic validation
(loss, perplexity, bits per byte) and downstream evaluations every K steps
(model.pretrain.downstream); checkpoints with exact resume; a stop, skip, warning or
rollback on non-finite steps and loss spikes (model.pretrain.divergence); a time estimate
measured over the first steps.
A continued run (`train.init_from`) starts from another run's final weights at its step,
with fresh optimizer moments, re-warms and decays over its own steps, and reads a mixture
of new and replayed shards (model.pretrain.data.MixtureWindows).
Rank 0 writes one JSON object per record to `<out>/metrics.jsonl`, a readable line to
stdout, and, when launched by Dagster, logs and the materialization through Pipes
(model.launch.sinks). On several nodes every rank resumes from the same checkpoint, shared
through `train.checkpoint_mirror` or a shared `out` (model.checkpoint.mirror).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from model.checkpoint import state as ckpt
from model.checkpoint.mirror import CheckpointSync
from model.core import flops, optim, parallel, precision
from model.core.config import ModelConfig, PretrainRun, TrainConfig
from model.core.gpt import GPT
from model.core.precision import autocast
from model.launch.sinks import Reporter, run_reported
from model.pretrain import downstream, faults, preflight
from model.pretrain.data import MixtureWindows, TokenWindows, source_tokens
from model.pretrain.divergence import Detector, Verdict
from model.pretrain.early_stop import EarlyStop
from model.pretrain.train_data import Corpus, evaluate, loader_sources, lr_for, make_loader


class TrainingStopped(RuntimeError):
    pass


def train(cfg: TrainConfig, mcfg: ModelConfig) -> dict:
    d = parallel.init(cfg.dist_timeout_s, group_of_one=cfg.fsdp)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    return run_reported(out, d, cfg.steps, lambda report: _train(cfg, mcfg, d, out, report))


def _train(cfg: TrainConfig, mcfg: ModelConfig, d: parallel.Dist, out: Path, report: Reporter) -> dict:
    accum = cfg.micro_steps(d.world)
    dtype = precision.resolve(cfg.dtype, d.device)  # the run's identity keeps cfg.dtype ("auto")
    if warning := precision.emulated_warning(cfg.dtype, d.device):
        report(event="warning", message=warning)
    corpus = Corpus.read(cfg.shards)
    sources = loader_sources(cfg)
    # before the model exists (and the loader): a run that cannot fit must not allocate it first
    budget = preflight.plan(mcfg, batch_size=cfg.batch_size, seq_len=cfg.seq_len, grad_accum=accum,
                            world_size=d.world, dtype=dtype, device=str(d.device), train_tokens=corpus.train_tokens,
                            activation_checkpointing=cfg.activation_checkpointing, fsdp=cfg.fsdp,
                            steps=cfg.steps - cfg.start_step, sources=source_tokens(sources or []))
    report(event="plan", summary=budget.summary(), **budget.to_dict())
    if cfg.preflight:
        preflight.check(budget)
    peak, peak_source = flops.peak_flops(d.device, dtype)
    flops_per_step = flops.flops_per_token(mcfg, cfg.seq_len) * cfg.batch_size * cfg.seq_len * accum * d.world
    peak_total = peak * (d.world if d.device.type == "cuda" else 1)  # CPU ranks share one machine
    torch.manual_seed(cfg.seed)
    model = GPT(mcfg).to(d.device)
    model.activation_checkpointing = cfg.activation_checkpointing
    sync = CheckpointSync(cfg, mcfg, d, out, lambda m: report(event="warning", message=m))
    last, state, init = sync.resume_point(), None, None  # the same checkpoint on every rank and node
    if last is not None:  # weights go in before FSDP shards them; a continued run resumes from its own
        ckpt.load_weights(last, model)
        optim_state, state = ckpt.load_training_state(last)
    elif cfg.init_from:
        init = _init_checkpoint(cfg)
        ckpt.load_weights(init, model)
    wrapped = parallel.wrap(model, cfg, d)
    # A continued run keeps the weights, not the optimizer state: the old moments describe
    # the end of a schedule decayed to min_lr on the old data, while the new segment
    # re-warms to the peak rate on shifted data. Fresh moments, bias-corrected from zero
    # during the re-warmup, are the usual continued-pretraining recipe, and any optimizer's
    # checkpoint (AdamW or Muon) can then be continued.
    opt = optim.build(model, cfg, fused=d.device.type == "cuda")
    loader = make_loader(cfg, d)
    step, tokens_seen, last_metrics = cfg.start_step, 0, {}
    stopper = EarlyStop(cfg.early_stop_patience, cfg.early_stop_min_delta)
    detector = Detector(cfg.spike_factor, cfg.spike_window, cfg.spike_patience)
    # the bad steps and rollbacks so far, the learning rate's scale after them, and the
    # batches the loader has given (a corrupted batch is known by its ordinal: faults)
    div = {"bad_steps": 0, "rollbacks": [], "lr_scale": 1.0, "batches": 0}
    if init is not None:  # tokens_seen counts the model's whole life
        tokens_seen = init.state().get("tokens_seen", 0)
        report(event="continue", step=step, checkpoint=str(init.path), steps=cfg.steps, tokens_seen=tokens_seen,
               sources=getattr(loader, "names", []))
    if state is not None:
        parallel.load_optimizer(model, opt, optim_state, cfg, d)
        loader.load_state_dict(state["loader"])
        step, tokens_seen = state["step"], state["tokens_seen"]
        last_metrics = state.get("metrics", {})
        stopper.load_state_dict(state.get("early_stop"))
        detector.load_state_dict(state.get("detector"))
        div |= state.get("divergence", {})
        report(event="resume", step=step, checkpoint=str(last.path))
    step_fn = parallel.compile_if_asked(wrapped, cfg, d, lambda m: report(event="warning", message=m))
    start_step = step
    tokens_per_step = cfg.batch_size * cfg.seq_len * accum * d.world
    report(event="start", step=step, parameters=model.num_params(), tokens_per_step=tokens_per_step, grad_accum=accum,
           world_size=d.world, device=str(d.device), dtype=dtype, fsdp=parallel.sharded(cfg), peak_flops=peak,
           peak_source=peak_source,
           config=dataclasses.asdict(cfg), model=dataclasses.asdict(mcfg))
    t0 = time.perf_counter()
    probe = (start_step + 1, start_step + 1 + cfg.warmup_probe_steps)  # the first step pays for compilation
    t_probe, final = None, last  # the checkpoint this run ends on (resumed at the end: the one loaded)
    bad_batches = faults.bad_batches()
    watch = _downstream(cfg, d, report)
    eval_total = 0.0  # seconds of downstream evaluation in this process
    while step < cfg.steps and not stopper.should_stop:
        opt.set_lr_factor(div["lr_scale"] * lr_for(cfg, step) / cfg.lr)
        lr = opt.param_groups[0]["lr"]
        loss_sum = torch.zeros((), device=d.device)
        for micro in range(accum):
            x, y = loader.next_batch()
            div["batches"] += 1
            with parallel.no_sync(wrapped, cfg, d, micro == accum - 1), autocast(cfg.dtype, d.device):
                _, loss = step_fn(x.to(d.device), y.to(d.device))
                loss = faults.corrupt(loss, div["batches"], bad_batches)
                (loss / accum).backward()
            loss_sum += loss.detach() / accum
        if d.world > 1:  # the mean over ranks (gloo has no AVG)
            dist.all_reduce(loss_sum)
            loss_sum /= d.world
        loss_value = loss_sum.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        verdict = detector.check(step + 1, loss_value, grad_norm)  # the same on every rank: loss and norm are global
        if verdict is not None:
            div["bad_steps"] += 1
            action = _action(cfg, verdict, div)
            report(event="bad_step", step=step + 1, loss=loss_value, grad_norm=grad_norm, problem=verdict.problem,
                   action=action)
            if action == "stop":
                raise TrainingStopped(f"step {step + 1}: {verdict.problem}; " + (
                    f"{len(div['rollbacks'])} rollbacks already (train.max_rollbacks)" if div["rollbacks"] else
                    "set train.on_nonfinite to skip or rollback to go on, or lower the learning rate"))
            if action == "rollback":
                opt.zero_grad(set_to_none=True)
                back = _rollback(out, model, opt, cfg, d, step + 1, verdict, div)
                step, tokens_seen, last_metrics = back["step"], back["tokens_seen"], back.get("metrics", {})
                stopper.load_state_dict(back.get("early_stop"))
                detector.load_state_dict(back.get("detector"))
                report(event="rollback", **div["rollbacks"][-1])
                state_now = _train_state(loader, tokens_seen, last_metrics, cfg, mcfg, sync, stopper, detector, div)
                final = _resave(out, step, model, opt, cfg, mcfg, d, state_now, stopper, sync, final)
                continue
            if action == "warn":
                opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        step += 1
        tokens_seen += tokens_per_step
        now = time.perf_counter()
        elapsed = now - t0
        if step == probe[0]:
            t_probe = now
        tps = (step - start_step) * tokens_per_step / elapsed
        last_metrics = {"step": step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
                        "bad_steps": div["bad_steps"], "rollbacks": len(div["rollbacks"]),
                        "tokens_seen": tokens_seen, "elapsed_s": round(elapsed, 3), "tokens_per_s": round(tps, 1),
                        "mfu": round(tps / tokens_per_step * flops_per_step / peak_total, 4),
                        "eta_s": round(elapsed / (step - start_step) * (cfg.steps - step), 1), "time": time.time()}
        if cfg.warmup_probe_steps > 0 and step == probe[1] and t_probe is not None:
            sec = (now - t_probe) / cfg.warmup_probe_steps
            report(event="estimate", probe_steps=cfg.warmup_probe_steps, seconds_per_step=sec, steps=cfg.steps,
                   estimated_total_s=(now - t0) + sec * (cfg.steps - step), tokens_per_s=tokens_per_step / sec,
                   mfu=flops_per_step / sec / peak_total, peak_flops=peak_total,
                   peak_source=peak_source)
        improved = False
        if step % cfg.eval_every == 0 or step == cfg.steps:
            last_metrics |= evaluate(wrapped, cfg, d)
            improved = stopper.update(step, last_metrics.get("val_loss"))
        # rank 0 alone: the other ranks wait at the next collective
        if watch is not None and d.main and step % cfg.downstream_every == 0:
            if isinstance(watch[0], str):  # the tokenizer, loaded when first needed
                from model.core.chat import ChatTokenizer

                watch = (ChatTokenizer(watch[0]), *watch[1:])
            row = downstream.during_training(model, *watch, cfg.downstream_tokens, cfg.seed)
            eval_total += row["eval_seconds"]
            last_metrics |= row | {"eval_time_share": round(eval_total / (time.perf_counter() - t0), 4)}
        report(event="step", **last_metrics)
        # a new best is checkpointed at its step, and so is an early stop (to inspect or resume)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps or improved or stopper.should_stop:
            weights, optim_state = parallel.full_state(model, opt, cfg, d)
            if d.main:
                saved = ckpt.save(out, step, weights, optim_state,
                                  _train_state(loader, tokens_seen, last_metrics, cfg, mcfg, sync, stopper, detector,
                                               div),
                                  keep=cfg.keep_checkpoints, tied=mcfg.tie_embeddings,
                                  tokenizer=cfg.tokenizer or None, protect=stopper.protected())
                report(event="checkpoint", step=step, path=str(saved.path), best=improved)
                stopper.write(out, step)
                sync.publish(saved, stopper.protected())  # before the barrier: no rank runs ahead of a copy others may need
                final = saved
            if d.world > 1:
                dist.barrier()
    if stopper.should_stop:  # now, or already at the checkpoint this run resumed from
        stopper.stopped_at = step
        report(event="early_stop", step=step, best_step=stopper.best_step, best_val_loss=stopper.best_val,
               patience=cfg.early_stop_patience, evals_since_best=stopper.evals_since_best)
    if d.main and final is not None:
        stopper.write(out, final.step)
    if d.device.type == "cuda":  # what the plan estimated, against what the allocator held at most
        last_metrics |= {"peak_memory_bytes": torch.cuda.max_memory_allocated(d.device),
                         "planned_memory_bytes": budget.total_bytes}
    # the path of the checkpoint just written, not ckpt.latest(): that would hash every file again
    report(event="done", **last_metrics)
    report.materialize(_final_metadata(last_metrics, model.num_params(), d, final, stopper, out, cfg.steps, div))
    return last_metrics


def _init_checkpoint(cfg: TrainConfig) -> ckpt.Checkpoint:
    if cfg.start_step >= cfg.steps:
        raise ValueError(f"train.start_step ({cfg.start_step}) must be below train.steps ({cfg.steps})")
    found = ckpt.latest(cfg.init_from)
    if found is None or found.step != cfg.start_step:
        raise ckpt.CheckpointError(f"cannot continue from {cfg.init_from}: no intact checkpoint of step "
                                   f"{cfg.start_step} there")
    return found


def _tokens_per_source(loader: TokenWindows | MixtureWindows) -> dict[str, int]:
    """Training tokens each source group has given this run (windows x targets per window)."""
    if isinstance(loader, MixtureWindows):
        return {k: v * loader.seq_len for k, v in loader.windows_per_source().items()}
    return {}


def _final_metadata(m: dict, params: int, d: parallel.Dist, final, stopper: EarlyStop, out: Path,
                    steps: int, div: dict) -> dict:
    """`checkpoint`: the best one (what the stages consume), `last_checkpoint`: the last."""
    md = {k: m[k] for k in ("loss", "val_loss", "val_ppl", "val_bpb", "tokens_seen", "tokens_per_s", "mfu", "step",
                            "peak_memory_bytes", "planned_memory_bytes")
          if isinstance(m.get(k), (int, float))}
    md |= {"parameters": params, "world_size": d.world, "device": str(d.device)}
    md |= {"bad_steps": div["bad_steps"], "rollbacks": len(div["rollbacks"])}
    if div["rollbacks"]:
        md["rollback_events"] = div["rollbacks"]
    return md | (stopper.metadata(out, final.path, steps) if final is not None else {})


def _downstream(cfg: TrainConfig, d: parallel.Dist, report: Reporter) -> tuple | None:
    """(tokenizer directory, QA pairs, prompts) for the evaluations during training, or
    None when there are none (downstream_every 0 or beyond this run's steps, no tokenizer
    beside the run, or FSDP: its shards make a forward pass of one rank alone impossible)."""
    if not cfg.downstream_every or not cfg.tokenizer:
        return None
    if parallel.sharded(cfg):
        report(event="warning", message="train.downstream_every: no evaluations during an FSDP run (eval_report "
                                        "evaluates its checkpoints)")
        return None
    from model.core.config import SAMPLE_PROMPTS

    if cfg.steps // cfg.downstream_every == cfg.start_step // cfg.downstream_every:
        return None  # no step of this run is an evaluation step
    path = Path(cfg.downstream_qa) if cfg.downstream_qa else None
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path is not None and path.is_file() else []
    return cfg.tokenizer, pairs[:cfg.downstream_qa_pairs], SAMPLE_PROMPTS[:cfg.downstream_samples]


def _train_state(loader, tokens_seen: int, metrics: dict, cfg: TrainConfig, mcfg: ModelConfig, sync: CheckpointSync,
                 stopper: EarlyStop, detector: Detector, div: dict) -> dict:
    """What a checkpoint holds besides weights and optimizer: all a resume needs to go on
    exactly as the run would have (the loader's position, the detector's window, the
    rollbacks and the learning rate's scale after them)."""
    return {"loader": loader.state_dict(), "tokens_seen": tokens_seen, "tokens_per_source": _tokens_per_source(loader),
            "metrics": metrics, "train_config": dataclasses.asdict(cfg), "model_config": dataclasses.asdict(mcfg),
            "run_identity": sync.identity, "early_stop": stopper.state_dict(), "detector": detector.state_dict(),
            "divergence": json.loads(json.dumps(div))}


def _action(cfg: TrainConfig, verdict: Verdict, div: dict) -> str:
    """What to do about a bad step: the configured action, except that a non-finite step
    is never trained on (warn skips it) and rollbacks stop after max_rollbacks."""
    action = cfg.on_nonfinite
    if action == "warn" and verdict.nonfinite:
        return "skip"
    if action == "rollback" and len(div["rollbacks"]) >= cfg.max_rollbacks:
        return "stop"
    return action


def _rollback(out: Path, model: torch.nn.Module, opt, cfg: TrainConfig, d: parallel.Dist, step: int,
              verdict: Verdict, div: dict) -> dict:
    """Reload the weights and optimizer of the last checkpoint from before the trouble
    started; the loader stays where it is, past the batches of every step since that
    checkpoint (the ones that caused the spike among them). Checkpoints after it belong to
    the abandoned branch and are removed. Returns the checkpoint's training state."""
    good = [c for c in ckpt.all_checkpoints(out) if c.step < verdict.first_step]
    if not good:
        raise TrainingStopped(f"step {step}: {verdict.problem}, and no checkpoint before step {verdict.first_step} "
                              "to roll back to; lower train.checkpoint_every")
    to = good[-1]
    ckpt.load_weights(to, model)
    optim_state, state = ckpt.load_training_state(to)
    parallel.load_optimizer(model, opt, optim_state, cfg, d)
    if d.world > 1:
        dist.barrier()  # every rank has read it before rank 0 rewrites or removes anything
    if d.main:
        for c in ckpt.all_checkpoints(out):
            if c.step > to.step:
                shutil.rmtree(c.path, ignore_errors=True)
    div["lr_scale"] *= cfg.rollback_lr_factor
    div["rollbacks"].append({"step": step, "to_step": to.step, "skipped_steps": step - to.step,
                             "skipped_batches": (step - to.step) * cfg.micro_steps(d.world),
                             "problem": verdict.problem, "lr_scale": div["lr_scale"]})
    return state


def _resave(out: Path, step: int, model: torch.nn.Module, opt, cfg: TrainConfig, mcfg: ModelConfig,
            d: parallel.Dist, state: dict, stopper: EarlyStop, sync: CheckpointSync, final):
    """The checkpoint rolled back to, written again with the loader past the skipped
    batches and the rollback recorded: a run killed now resumes exactly as it goes on."""
    weights, optim_state = parallel.full_state(model, opt, cfg, d)
    if d.main:
        final = ckpt.save(out, step, weights, optim_state, state, keep=cfg.keep_checkpoints,
                          tied=mcfg.tie_embeddings, tokenizer=cfg.tokenizer or None, protect=stopper.protected())
        stopper.write(out, step)
        sync.publish(final, stopper.protected())
    if d.world > 1:
        dist.barrier()
    return final


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help='JSON file: {"train": {...TrainConfig}, "model": {...ModelConfig}}')
    args = p.parse_args(argv)
    run = PretrainRun.from_json(json.loads(Path(args.config).read_text()))
    cfg, mcfg = run.train, run.model
    try:
        train(cfg, mcfg)
    except TrainingStopped as e:
        print(f"training stopped: {e}", file=sys.stderr)
        return 3
    except preflight.PreflightError as e:
        print(f"refused before training:\n{e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
