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
from datetime import timedelta

import torch
import torch.distributed as dist

from model.core.config import TrainConfig
from model.core.optim import Optimizers
from model.launch.supervise import NODE_RANK_ENV


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    local_world: int = 1  # processes on this node

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        return max(1, self.world // self.local_world)


def init(timeout_s: float = 0, group_of_one: bool = False) -> Dist:
    """`timeout_s` > 0: how long a collective waits for a peer before failing (a dead node
    is noticed then, not after torch's default half hour). `group_of_one`: a process group
    even for one process (FSDP2 needs one: `fully_shard` on one device is the same code path
    as on many, which is how it is exercised on a single GPU)."""
    if "LOCAL_RANK" in os.environ:  # under torchrun
        _exit_with_parent()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    if world == 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
        if group_of_one and not dist.is_initialized():  # an in-memory store: no address or port needed
            dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
        return Dist(device=device)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if cuda:
        torch.cuda.set_device(local)
    backend = "nccl" if cuda else "gloo"
    timeout = {"timeout": timedelta(seconds=timeout_s)} if timeout_s > 0 else {}
    rank = _node_ordered_rank(world, local, local_world)
    if rank is None:
        dist.init_process_group(backend, **timeout)
    else:
        store = _worker_store(world, timedelta(seconds=timeout_s or 1800))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, **timeout)
        os.environ["RANK"] = str(rank)  # for anything that reads it later
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    return Dist(dist.get_rank(), world, local, device, local_world)


def _node_ordered_rank(world: int, local: int, local_world: int) -> int | None:
    """On several nodes, the rank this process takes: node_rank x processes per node +
    local rank, where node_rank is the configured one (model.launch.supervise sets NODE_RANK_ENV).
    torchrun's c10d rendezvous numbers nodes by host name and process id instead, so rank 0,
    which writes checkpoints and reports to Dagster, could land on a node without Dagster.
    None: one node, or a layout this does not cover (torchrun's ranks are kept)."""
    node = os.environ.get(NODE_RANK_ENV)
    if node is None or world <= local_world or world % local_world:
        return None
    rank = int(node) * local_world + local
    return rank if rank < world else None


def _worker_store(world: int, timeout: timedelta) -> dist.Store:
    """The store the process group meets in: the one torchrun's rendezvous named. With the
    agents' shared store off (model.launch.supervise.RDZV_ENV) torchrun's rank 0 worker hosts it;
    passing our own rank to init_process_group would otherwise make another process the host."""
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                         is_master=not agent_store and os.environ.get("RANK") == "0", timeout=timeout,
                         multi_tenant=True)


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


def sharded(cfg: TrainConfig) -> bool:
    """FSDP2 is on: asked for, with a process group (several ranks, or init's group of one)."""
    return cfg.fsdp and dist.is_initialized()


def wrap(model: torch.nn.Module, cfg: TrainConfig, d: Dist) -> torch.nn.Module:
    """The module the training step calls: DDP / FSDP2 across ranks. FSDP2 shards the
    parameters in place, so the optimizer must be built after this."""
    if sharded(cfg):
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
        if sharded(cfg):
            module.set_requires_gradient_sync(True)
        return contextlib.nullcontext()
    if sharded(cfg):
        module.set_requires_gradient_sync(False)
        return contextlib.nullcontext()
    return module.no_sync()


def full_state(model: torch.nn.Module, opt: Optimizers, cfg: TrainConfig, d: Dist) -> tuple[dict, dict]:
    """(weights, optimizer state), unsharded, on CPU. Under FSDP every rank must call
    this (it gathers); only rank 0's result is complete."""
    if not sharded(cfg):
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
    if not sharded(cfg):
        opt.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    if set(state) != set(opt.optimizers):
        raise ValueError(f"checkpoint has optimizer state for {sorted(state)}, this run uses {sorted(opt.optimizers)}")
    for name, o in opt.optimizers.items():
        set_optimizer_state_dict(model, o, state[name], options=StateDictOptions(full_state_dict=True))
