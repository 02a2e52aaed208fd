"""The pretraining program: `torchrun [...] -m model.train --config run.json` (or plain
`python -m model.train` for one process).

DDP when WORLD_SIZE > 1 (gloo on CPU, NCCL on GPU); AdamW (fused on CUDA); warmup +
cosine or warmup-stable-decay; gradient clipping; accumulation; bf16 autocast; periodic
validation (loss, perplexity, bits per byte); checkpoints with exact resume; a stop or
skip on non-finite losses and loss spikes. Rank 0 writes one JSON object per line to
stdout and to `<out>/metrics.jsonl`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from model import checkpoint as ckpt
from model import preflight
from model.config import ModelConfig
from model.data import TokenWindows, validation_batches
from model.gpt import GPT
from model.schedule import lr_at
from pipelines.token_format import TokenShard


@dataclass
class TrainConfig:
    shards: list[str] = field(default_factory=list)  # token_shards directories
    out: str = "checkpoints"
    steps: int = 1000
    batch_size: int = 8  # sequences per rank per micro-step
    seq_len: int = 256
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 50
    schedule: str = "cosine"  # or "wsd"
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    dtype: str = "fp32"  # "bf16": autocast (weights and optimizer stay fp32)
    eval_every: int = 100
    eval_batches: int = 20
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    seed: int = 0
    on_nonfinite: str = "stop"  # or "skip": drop the step's update
    spike_factor: float = 0.0  # > 0: a loss above factor x the running mean is a spike (stop/skip)
    threads: int = 0  # torch intra-op threads on CPU (0: leave torch's default)
    activation_checkpointing: bool = False
    preflight: bool = True  # refuse a run whose memory estimate exceeds the device


class TrainingStopped(RuntimeError):
    pass


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_dist() -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return _Dist(device=torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return _Dist(dist.get_rank(), world, local, torch.device("cuda", local) if cuda else torch.device("cpu"))


class Reporter:
    """Rank 0's metrics: stdout (the launcher streams it) and metrics.jsonl."""

    def __init__(self, out: Path, enabled: bool):
        self.enabled = enabled
        self.file = open(out / "metrics.jsonl", "a") if enabled else None  # noqa: SIM115 - closed in close()

    def __call__(self, **record) -> None:
        if not self.enabled:
            return
        line = json.dumps(record)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


def _autocast(cfg: TrainConfig, device: torch.device):
    if cfg.dtype == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if cfg.dtype != "fp32":
        raise ValueError(f"dtype must be fp32 or bf16, got {cfg.dtype!r}")
    return torch.autocast(device.type, enabled=False)


def evaluate(model: torch.nn.Module, cfg: TrainConfig, d: _Dist, bytes_per_token: float) -> dict:
    model.eval()
    total, count = torch.zeros(2, dtype=torch.float64, device=d.device), 0
    with torch.no_grad():
        for x, y in validation_batches(cfg.shards, cfg.seq_len, cfg.batch_size, rank=d.rank, world_size=d.world,
                                       max_batches=cfg.eval_batches * d.world):
            with _autocast(cfg, d.device):
                _, loss = model(x.to(d.device), y.to(d.device))
            total += torch.tensor([loss.item() * y.numel(), y.numel()], dtype=torch.float64, device=d.device)
            count += 1
    if d.world > 1:
        dist.all_reduce(total)
    model.train()
    if total[1] == 0:
        return {}
    loss = (total[0] / total[1]).item()
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50)),
            "val_bpb": loss / math.log(2) / bytes_per_token if bytes_per_token else None}


def train(cfg: TrainConfig, mcfg: ModelConfig) -> dict:
    d = _init_dist()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    report = Reporter(out, d.main)
    # before the model exists: a run that cannot fit must not allocate it first
    splits = [TokenShard.open(s).header["splits"] for s in cfg.shards]
    train_tokens = sum(s["train"]["tokens"] for s in splits)
    val_tokens = sum(s["val"]["tokens"] for s in splits)
    bpt = sum(s["val"]["bytes"] for s in splits) / val_tokens if val_tokens else 0.0  # for bits per byte
    budget = preflight.plan(mcfg, batch_size=cfg.batch_size, seq_len=cfg.seq_len, grad_accum=cfg.grad_accum,
                            world_size=d.world, dtype=cfg.dtype, device=str(d.device), train_tokens=train_tokens,
                            activation_checkpointing=cfg.activation_checkpointing)
    report(event="plan", summary=budget.summary(), **budget.to_dict())
    if cfg.preflight:
        preflight.check(budget)
    torch.manual_seed(cfg.seed)
    model = GPT(mcfg).to(d.device)
    model.activation_checkpointing = cfg.activation_checkpointing
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas,
                            fused=d.device.type == "cuda")
    loader = TokenWindows(cfg.shards, cfg.seq_len, cfg.batch_size, rank=d.rank, world_size=d.world, seed=cfg.seed)
    step, tokens_seen, running = 0, 0, None
    if (last := ckpt.latest(out)) is not None:
        ckpt.load_weights(last, model)
        state = ckpt.load_training_state(last, opt)
        loader.load_state_dict(state["loader"])
        step, tokens_seen, running = state["step"], state["tokens_seen"], state.get("running_loss")
        report(event="resume", step=step, checkpoint=str(last.path))
    ddp = torch.nn.parallel.DistributedDataParallel(model) if d.world > 1 else model
    start_step = step
    tokens_per_step = cfg.batch_size * cfg.seq_len * cfg.grad_accum * d.world
    report(event="start", step=step, parameters=model.num_params(), tokens_per_step=tokens_per_step,
           world_size=d.world, device=str(d.device), config=dataclasses.asdict(cfg), model=dataclasses.asdict(mcfg))
    t0, last_metrics = time.perf_counter(), {}
    while step < cfg.steps:
        lr = lr_at(step, lr=cfg.lr, min_lr=cfg.min_lr, warmup=cfg.warmup, total=cfg.steps, kind=cfg.schedule)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = torch.zeros((), device=d.device)
        for micro in range(cfg.grad_accum):
            x, y = loader.next_batch()
            sync = micro == cfg.grad_accum - 1 or d.world == 1
            ctx = ddp.no_sync() if not sync else contextlib.nullcontext()
            with ctx, _autocast(cfg, d.device):
                _, loss = ddp(x.to(d.device), y.to(d.device))
                (loss / cfg.grad_accum).backward()
            loss_sum += loss.detach() / cfg.grad_accum
        if d.world > 1:  # the mean over ranks (gloo has no AVG)
            dist.all_reduce(loss_sum)
            loss_sum /= d.world
        loss_value = loss_sum.item()
        problem = _problem(loss_value, running, cfg.spike_factor)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
        if problem:
            report(event="bad_step", step=step, loss=loss_value, problem=problem, action=cfg.on_nonfinite)
            if cfg.on_nonfinite == "stop":
                raise TrainingStopped(f"step {step}: {problem} (loss {loss_value}); set on_nonfinite=skip to "
                                      "drop such steps, or lower the learning rate")
            opt.zero_grad(set_to_none=True)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
            running = loss_value if running is None else 0.95 * running + 0.05 * loss_value
        step += 1
        tokens_seen += tokens_per_step
        elapsed = time.perf_counter() - t0
        last_metrics = {"step": step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm,
                        "tokens_seen": tokens_seen, "elapsed_s": round(elapsed, 3),
                        "tokens_per_s": round((step - start_step) * tokens_per_step / elapsed, 1),
                        "eta_s": round(elapsed / (step - start_step) * (cfg.steps - step), 1)}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            last_metrics |= evaluate(ddp, cfg, d, bpt)
        report(event="step", **last_metrics)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            if d.main:
                saved = ckpt.save(out, step, model, opt, {"loader": loader.state_dict(), "tokens_seen": tokens_seen,
                                                          "running_loss": running, "metrics": last_metrics,
                                                          "train_config": dataclasses.asdict(cfg),
                                                          "model_config": dataclasses.asdict(mcfg)},
                                  keep=cfg.keep_checkpoints)
                report(event="checkpoint", step=step, path=str(saved.path))
            if d.world > 1:
                dist.barrier()
    report(event="done", **last_metrics)
    report.close()
    if d.world > 1:
        dist.destroy_process_group()
    return last_metrics


def _problem(loss: float, running: float | None, spike_factor: float) -> str | None:
    if not math.isfinite(loss):
        return "non-finite loss"
    if spike_factor > 0 and running is not None and loss > spike_factor * running:
        return f"loss spike ({loss:.3f} > {spike_factor} x running mean {running:.3f})"
    return None


def _load(path: str) -> tuple[TrainConfig, ModelConfig]:
    raw = json.loads(Path(path).read_text())
    tc = raw.get("train", {})
    if "betas" in tc:
        tc["betas"] = tuple(tc["betas"])
    return TrainConfig(**tc), ModelConfig(**raw.get("model", {}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help='JSON file: {"train": {...TrainConfig}, "model": {...ModelConfig}}')
    args = p.parse_args(argv)
    cfg, mcfg = _load(args.config)
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
