"""The torchrun launcher: how many processes, on how many nodes, meeting where, with
what environment. The base_model asset (and the post-training stages after it) run the
training program through it, under Dagster Pipes. The command itself is model.launch.supervise's
(the same for `yunque node` on the other nodes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import dagster as dg
from dagster._core.errors import DagsterPipesExecutionError

from model.launch.spec import LaunchSpec, join_command, write_spec
from model.launch.supervise import Launch
from stages.training.runs import RunSpec


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
                process.send_signal(signal.SIGINT)  # model.launch.supervise stops its process group
                try:
                    process.wait(timeout=self.termination_timeout_seconds)
                except subprocess.TimeoutExpired:
                    process.kill()  # its children die with it (PR_SET_PDEATHSIG, parent watch)
                raise
            if process.returncode != 0:
                raise DagsterPipesExecutionError(f"External execution process failed with code {process.returncode}")
        return dg.PipesClientCompletedInvocation(session)


class TorchrunLauncher(dg.ConfigurableResource):
    """One node: `nproc_per_node` processes (1 on CPU; one per GPU). Several nodes: this
    node (the one running Dagster) is node 0 and hosts the c10d rendezvous at
    `rdzv_endpoint`; every other node joins with `yunque node` (model.launch.spec), which
    the asset's log spells out when the training starts."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0  # the node running Dagster is 0: it hosts the rendezvous, and its rank 0 reports back
    rdzv_endpoint: str = ""  # host:port of node 0 that the other nodes reach, required when nnodes > 1
    rdzv_id: str = "yunque"
    max_restarts: int = 3  # several nodes: torchrun restarts the workers this often when a node fails
    rdzv_timeout_s: int = 900  # how long the nodes wait for each other (at the start, and for a restarted node)
    rdzv_conf: str = ""  # more torchrun --rdzv-conf entries, e.g. "keep_alive_interval=2,keep_alive_max_attempt=3"
    env: dict[str, str] = {}  # noqa: RUF012 - pydantic copies defaults; extra environment for every rank (NCCL_*, OMP_NUM_THREADS, ...)
    timeout_s: int = 0  # stop the training after this many seconds (0: no limit)
    grace_s: int = 10  # between SIGTERM and SIGKILL when stopping

    def launch(self) -> Launch:
        return Launch(nproc_per_node=self.nproc_per_node, nnodes=self.nnodes, node_rank=self.node_rank,
                      rdzv_endpoint=self.rdzv_endpoint, rdzv_id=self.rdzv_id, max_restarts=self.max_restarts,
                      rdzv_timeout_s=self.rdzv_timeout_s, rdzv_conf=self.rdzv_conf, timeout_s=self.timeout_s,
                      grace_s=self.grace_s)

    def command(self, module: str, *args: str) -> list[str]:
        try:
            return self.launch().command(module, *args)
        except ValueError as e:
            raise dg.Failure(f"TorchrunLauncher: {e}", allow_retries=False) from e

    def prepare_nodes(self, run: RunSpec, module: str, home: str | Path, shown_home: str = "") -> list[str]:
        """Before node 0 starts a run on several nodes: write the launch spec the other
        nodes join from (into the run's directory) and return what to log: the command
        for each other node (`--home shown_home`, e.g. the object store URL of a home
        whose local cache is `home`). One node: nothing."""
        if self.nnodes == 1:
            return []
        if self.node_rank != 0:
            raise dg.Failure(f"TorchrunLauncher: the node running Dagster must be node 0 (node_rank={self.node_rank}):"
                             " it hosts the rendezvous and its rank 0 reports to Dagster; start the others with "
                             "`yunque node`", allow_retries=False)
        config = json.loads(run.config_path.read_text())  # exactly what node 0's program reads
        launch = {k: v for k, v in asdict(self.launch()).items() if k != "node_rank"}
        spec = LaunchSpec(asset=run.asset, module=module, config=config, config_name=run.config_path.name,
                          root=str(home), launch=launch, run_key=run.key,
                          env=dict(self.env))  # written into the home: NCCL_* and the like, never secrets
        path = write_spec(run.dir, spec)
        lines = [(f"{run.asset} trains on {self.nnodes} nodes x {self.nproc_per_node} processes, rendezvous at "
                  f"{self.rdzv_endpoint} (launch {spec.launch_id[:8]}, spec {path}); this is node 0. "
                  "Start every other node with (--home: that node's copy of this home):")]
        lines += [f"  node {n}: {join_command(shown_home or home, n, run.asset)}" for n in range(1, self.nnodes)]
        if "train" in config and not config["train"].get("checkpoint_mirror"):  # pretraining shares through it
            lines.append(f"warning: no train.checkpoint_mirror: every node must see the same {run.dir} (a shared "
                         "path), or a restarted node cannot resume from rank 0's checkpoints")
        return lines

    def client(self) -> PollingPipesSubprocessClient:
        # the supervisor (model.launch.supervise) stops the whole process group within grace_s of
        # Pipes' SIGINT; Pipes waits a little longer than that before giving up on it
        return PollingPipesSubprocessClient(env=dict(self.env), termination_timeout_seconds=self.grace_s + 10)
