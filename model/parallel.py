"""Process groups and the wrappers applied around the model, kept out of the model file
(as torchtitan does): DDP or FSDP2 (`fully_shard` per block, then the root), and
torch.compile; plus the full (unsharded) state dicts that checkpoints store either way,
so a checkpoint written by FSDP on 8 GPUs loads in one CPU process and vice versa.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from model.config import TrainConfig
from model.optim import Optimizers


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        return self.rank == 0


def init() -> Dist:
    if "LOCAL_RANK" in os.environ:  # under torchrun
        _exit_with_parent()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    if world == 1:
        return Dist(device=torch.device("cuda") if cuda else torch.device("cpu"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return Dist(dist.get_rank(), world, local, torch.device("cuda", local) if cuda else torch.device("cpu"))


def _exit_with_parent() -> None:
    """A worker whose torchrun died (killed, say) must not keep the GPU: exit when the
    parent changes. (PR_SET_PDEATHSIG would fire when the thread that started us exits,
    which for torchrun is not the process.)"""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(143)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def wrap(model: torch.nn.Module, cfg: TrainConfig, d: Dist) -> torch.nn.Module:
    """The module the training step calls: DDP / FSDP2 across ranks. FSDP2 shards the
    parameters in place, so the optimizer must be built after this."""
    if d.world > 1 and cfg.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
        return model
    if d.world > 1:
        return torch.nn.parallel.DistributedDataParallel(model)
    return model


def compile_if_asked(module: torch.nn.Module, cfg: TrainConfig, d: Dist, warn) -> torch.nn.Module:
    if not cfg.compile:
        return module
    if d.device.type == "cpu" and not (shutil.which(os.environ.get("CXX", "g++")) or shutil.which("clang++")):
        warn("train.compile is on but no C++ compiler was found (inductor needs one on CPU); running eager")
        return module
    return torch.compile(module)


def no_sync(module: torch.nn.Module, cfg: TrainConfig, d: Dist, last_micro: bool):
    """Skip the gradient all-reduce on all but the last micro-step (DDP); FSDP2 reduces
    on every backward unless told otherwise."""
    if d.world == 1 or last_micro:
        if cfg.fsdp and d.world > 1:
            module.set_requires_gradient_sync(True)
        return contextlib.nullcontext()
    if cfg.fsdp:
        module.set_requires_gradient_sync(False)
        return contextlib.nullcontext()
    return module.no_sync()


def full_state(model: torch.nn.Module, opt: Optimizers, cfg: TrainConfig, d: Dist) -> tuple[dict, dict]:
    """(weights, optimizer state), unsharded, on CPU. Under FSDP every rank must call
    this (it gathers); only rank 0's result is complete."""
    if not (cfg.fsdp and d.world > 1):
        return {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, opt.state_dict()
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    optim = {name: get_optimizer_state_dict(model, o, options=options) for name, o in opt.optimizers.items()}
    return weights, optim


def load_optimizer(model: torch.nn.Module, opt: Optimizers, state: dict, cfg: TrainConfig, d: Dist) -> None:
    if not (cfg.fsdp and d.world > 1):
        opt.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if set(state) != set(opt.optimizers):
        raise ValueError(f"checkpoint has optimizer state for {sorted(state)}, this run uses {sorted(opt.optimizers)}")
    for name, o in opt.optimizers.items():
        set_optimizer_state_dict(model, o, state[name], options=StateDictOptions(full_state_dict=True))
