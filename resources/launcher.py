"""The torchrun launcher: how many processes, on how many nodes, meeting where, with
what environment. The base_model asset (and the post-training stages after it) run the
training program through it, under Dagster Pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dagster as dg
from dagster._core.errors import DagsterPipesExecutionError


class PollingPipesSubprocessClient(dg.PipesSubprocessClient):
    """PipesSubprocessClient whose wait polls. The stock client blocks in waitpid; when
    the kernel delivers the cancellation SIGINT to another thread of the run worker (the
    Pipes reader thread, torch's), Python only runs the handler once waitpid returns, so
    cancelling a training run did nothing until training ended (measured). Polling lets
    the handler raise within half a second."""

    def run(self, *, context, extras=None, command, env=None, cwd=None):
        with dg.open_pipes_session(context=context, context_injector=self.context_injector,
                                   message_reader=self.message_reader, extras=extras) as session:
            process = subprocess.Popen(command, cwd=cwd or self.cwd,
                                       env={**os.environ, **self.env, **(env or {}),
                                            **session.get_bootstrap_env_vars()})
            try:
                while process.poll() is None:
                    time.sleep(0.5)
            except dg.DagsterExecutionInterruptedError:
                context.log.info("[pipes] run interrupted: stopping the training process tree")
                process.send_signal(signal.SIGINT)  # model.launch stops its process group
                try:
                    process.wait(timeout=self.termination_timeout_seconds)
                except subprocess.TimeoutExpired:
                    process.kill()  # its children die with it (PR_SET_PDEATHSIG, parent watch)
                raise
            if process.returncode != 0:
                raise DagsterPipesExecutionError(f"External execution process failed with code {process.returncode}")
        return dg.PipesClientCompletedInvocation(session)


class TorchrunLauncher(dg.ConfigurableResource):
    """One node: `nproc_per_node` processes (1 on CPU; one per GPU). Several nodes: the
    same resource on each, with `nnodes`, `node_rank` and a shared `rdzv_endpoint`."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""  # host:port of the rendezvous (c10d), required when nnodes > 1
    rdzv_id: str = "yunque"
    env: dict[str, str] = {}  # noqa: RUF012 - pydantic copies defaults; extra environment for every rank (NCCL_*, OMP_NUM_THREADS, ...)
    timeout_s: int = 0  # stop the training after this many seconds (0: no limit)
    grace_s: int = 10  # between SIGTERM and SIGKILL when stopping

    def command(self, module: str, *args: str) -> list[str]:
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise dg.Failure(f"TorchrunLauncher: nnodes={self.nnodes} needs rdzv_endpoint (host:port of node 0)")
        torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc_per_node}"]
        if self.nnodes == 1:
            torchrun.append("--standalone")
        else:
            torchrun += [f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}", "--rdzv-backend=c10d",
                         f"--rdzv-endpoint={self.rdzv_endpoint}", f"--rdzv-id={self.rdzv_id}"]
        supervisor = [sys.executable, "-m", "model.launch", f"--timeout={self.timeout_s}", f"--grace={self.grace_s}",
                      "--"]
        return [*supervisor, *torchrun, "-m", module, *args]

    def client(self) -> PollingPipesSubprocessClient:
        # the supervisor (model.launch) stops the whole process group within grace_s of
        # Pipes' SIGINT; Pipes waits a little longer than that before giving up on it
        return PollingPipesSubprocessClient(env=dict(self.env), termination_timeout_seconds=self.grace_s + 10)
