"""The post-training program: `torchrun [...] -m model.post.train --config train_config.json`.

train_config.json is a PostRun (model/post/config.py) as the stage layer wrote it: the
stage, its recipe, the checkpoint to start from, the reward model's (PPO), the user's data file, the
SFT mixture, the base model's token shards for replay, this stage's directory and the
lineage. It is read once, in `train`, into that one typed object.

One loop for every stage: the stage object (model/post/sft.py, pref.py, rl.py)
owns its data, its models and what one step computes; the loop owns the optimizer, the
schedule, DDP, checkpoints with exact resume and the records (metrics.jsonl, stdout,
Dagster Pipes, MLflow: model.launch.sinks), as model/pretrain/train.py does for pretraining, and the
replay of pretraining text (model/post/replay.py) that every update of a stage training the
language model adds to its loss.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from model.checkpoint import state as ckpt
from model.checkpoint.load import load
from model.core import parallel
from model.core.schedule import lr_at
from model.launch.sinks import Reporter, run_reported
from model.post.config import PostRun, StageConfig
from model.post.replay import Replay, off_summary


def build_optimizer(module: torch.nn.Module, cfg: StageConfig, fused: bool) -> torch.optim.AdamW:
    params = [p for p in module.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=cfg.lr, betas=tuple(cfg.betas), fused=fused)


def _build(run: PostRun, cfg: StageConfig, d: parallel.Dist, report: Reporter):
    from model.post import pref as post_pref
    from model.post import rl as post_rl
    from model.post import sft as post_sft

    builders = {"sft": post_sft.SFT, "reward": post_sft.Reward, "dpo": post_pref.Preference,
                "ppo": post_rl.PPO, "grpo": post_rl.GRPO}
    loaded = load(ckpt_or_raise(run.init), device=d.device)
    loaded.model.train()
    return builders[run.stage](cfg, loaded, d, run, report), loaded


def ckpt_or_raise(path: str) -> ckpt.Checkpoint:
    found = ckpt.latest(path)
    if found is None:
        raise FileNotFoundError(f"no intact checkpoint at {path} to start from")
    return found


def train(run: PostRun | Mapping[str, Any]) -> dict:
    """Train one stage; `run` as PostRun, or as train_config.json's mapping (read once, here)."""
    run = run if isinstance(run, PostRun) else PostRun.from_json(run)
    d = parallel.init()
    stage_name = run.stage
    cfg = run.train
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(run.out)
    return run_reported(out, d, cfg.steps, lambda report: _train(run, cfg, d, out, report), name=stage_name)


def _train(run: PostRun, cfg: StageConfig, d: parallel.Dist, out: Path, report: Reporter) -> dict:
    torch.manual_seed(cfg.seed)
    stage, loaded = _build(run, cfg, d, report)
    replay = Replay(cfg, loaded, d, run) if cfg.replay and stage.trains_lm else None
    report(event="plan", summary=stage.summary() + "\n" + (replay.summary(cfg) if replay else off_summary(stage)),
           **stage.plan(), **(replay.plan(cfg) if replay else {"replay": 0.0}))
    module = stage.module
    last, step, last_metrics = ckpt.latest(out), 0, {}
    opt = build_optimizer(module, cfg, fused=d.device.type == "cuda")
    if last is not None:
        ckpt.load_weights(last, loaded.model)
        stage.load_heads(ckpt.load_heads(last))
        optim_state, state = ckpt.load_training_state(last)
        opt.load_state_dict(optim_state)
        stage.load_state_dict(state.get("stage_state", {}))
        if replay is not None:
            replay.load_state_dict(state.get("replay", {}))
        step, last_metrics = state["step"], state.get("metrics", {})
        report(event="resume", step=step, checkpoint=str(last.path))
    if d.world > 1:
        stage.forward_module = torch.nn.parallel.DistributedDataParallel(module)
    report(event="start", step=step, parameters=sum(p.numel() for p in module.parameters()), world_size=d.world,
           device=str(d.device), config=dataclasses.asdict(cfg))

    if step == 0 and cfg.steps > 0:  # the starting model, measured as every evaluation will measure the stage
        report(event="baseline", step=0, **{f"eval_{k}": v for k, v in stage.evaluate().items()})

    def update(loss: torch.Tensor) -> float:
        if replay is not None:  # through the GPT itself: one backward, so DDP reduces the sum once
            loss = loss + replay.loss(loaded.model)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(norm)

    t0, start, final = time.perf_counter(), step, last
    while step < cfg.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, lr=cfg.lr, min_lr=cfg.min_lr, warmup=cfg.warmup, total=cfg.steps)
        lr = opt.param_groups[0]["lr"]
        metrics = stage.step(step, update) | (replay.metrics() if replay else {})
        step += 1
        elapsed = time.perf_counter() - t0
        last_metrics = {"step": step, **metrics, "lr": lr, "elapsed_s": round(elapsed, 3),
                        "eta_s": round(elapsed / (step - start) * (cfg.steps - step), 1), "time": time.time()}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            last_metrics |= {f"eval_{k}": v for k, v in stage.evaluate().items()}
        report(event="step", **last_metrics)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            final = _save(out, step, stage, replay, loaded, opt, cfg, run, last_metrics, d) or final
    if cfg.steps == 0 and last is None:  # nothing to train: the stage is its starting model
        last_metrics = {"step": 0, **{f"eval_{k}": v for k, v in stage.evaluate().items()}}
        final = _save(out, 0, stage, replay, loaded, opt, cfg, run, last_metrics, d) or final
    report(event="done", **last_metrics)
    report.materialize({k: v for k, v in last_metrics.items() if isinstance(v, (int, float)) and k != "time"}
                       | {"checkpoint": {"raw_value": str(final.path), "type": "path"} if final else ""})
    return last_metrics


def _save(out: Path, step: int, stage, replay: Replay | None, loaded, opt, cfg: StageConfig, run: PostRun,
          metrics: dict, d: parallel.Dist) -> ckpt.Checkpoint | None:
    saved = None
    if d.main:
        init_state = loaded.state
        state = {"stage_state": stage.state_dict(), "replay": replay.state_dict() if replay else {},
                 "metrics": metrics, "stage": run.stage,
                 "post_config": dataclasses.asdict(cfg), "model_config": dataclasses.asdict(loaded.config),
                 # the pretraining run's windows: evaluation measures every stage on the same validation tokens
                 "train_config": init_state.get("train_config", {}), "lineage": run.lineage}
        saved = ckpt.save(out, step, loaded.model.state_dict(), opt.state_dict(), state,
                          keep=cfg.keep_checkpoints, tied=loaded.config.tie_embeddings,
                          tokenizer=loaded.tokenizer.directory, heads=stage.heads())
    if d.world > 1:
        dist.barrier()
    return saved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="the stage's train_config.json (see the module docstring)")
    args = p.parse_args(argv)
    run = json.loads(Path(args.config).read_text())
    try:
        train(run)
    except FileNotFoundError as e:
        print(f"cannot start: {e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
