"""Where rank 0's training records go: metrics.jsonl (always), a readable line on stdout,
Dagster Pipes (when launched by the base_model asset) and MLflow (when MLFLOW_RUN_ID and
MLFLOW_TRACKING_URI are set; the asset creates the run and sets both).

Only `dagster_pipes` is used here, the small package made for external processes; the
training program never imports dagster itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEP_METRICS = ("loss", "lr", "grad_norm", "tokens_seen", "tokens_per_s", "mfu", "val_loss", "val_ppl", "val_bpb",
                "bad_steps", "rollbacks", "eval_domain_qa_nll", "eval_repeat_4_max", "eval_distinct_2_mean",
                "eval_seconds", "eval_time_share")


class MlflowSink:
    """Per-step metrics, batched: one sqlite write per `every` steps, not per step."""

    def __init__(self, every: int = 20, names: tuple[str, ...] | None = STEP_METRICS):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
        self.run_id = os.environ["MLFLOW_RUN_ID"]
        self.every, self.pending, self.names = every, [], names  # None: every number in the record

    def step(self, record: dict) -> None:
        from mlflow.entities import Metric

        ts = int(record.get("time", 0) * 1000)
        names = self.names or [k for k in record if k not in ("step", "time")]
        self.pending += [Metric(k, float(record[k]), ts, record["step"]) for k in names
                         if isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)]
        if len(self.pending) >= self.every * 5 or "val_loss" in record:
            self.flush()

    def flush(self) -> None:
        for i in range(0, len(self.pending), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=self.pending[i:i + 1000])
        self.pending = []


class PipesSink:
    def __init__(self):
        from dagster_pipes import open_dagster_pipes

        self._cm = open_dagster_pipes()
        self.pipes = self._cm.__enter__()

    def log(self, text: str) -> None:
        self.pipes.log.info(text)

    def materialize(self, metadata: dict[str, Any], data_version: str | None = None) -> None:
        self.pipes.report_asset_materialization(metadata=metadata, data_version=data_version)

    def close(self, error: BaseException | None = None) -> None:
        if error is None:
            self._cm.__exit__(None, None, None)
        else:
            self._cm.__exit__(type(error), error, error.__traceback__)


class Reporter:
    """Rank 0's records. `print_every`: how often a step gets a line on stdout (evaluation
    steps and events always do)."""

    def __init__(self, out: Path, enabled: bool, total_steps: int = 0, print_every: int = 0, name: str = "train"):
        """`name` "train" is pretraining; any other (a post-training stage) prefixes its
        lines with it and sends every number of a step record to MLflow."""
        self.enabled, self.name = enabled, name
        self.total = total_steps
        self.print_every = print_every or max(1, total_steps // 20)
        self.file = open(out / "metrics.jsonl", "a") if enabled else None  # noqa: SIM115 - closed in close()
        self.pipes = PipesSink() if enabled and "DAGSTER_PIPES_CONTEXT" in os.environ else None
        self.mlflow = MlflowSink(names=STEP_METRICS if name == "train" else None) \
            if enabled and "MLFLOW_RUN_ID" in os.environ else None

    def __call__(self, **record) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        event = record.get("event")
        if event == "step":
            if self.mlflow:
                self.mlflow.step(record)
            evaluated = "val_loss" in record or any(k.startswith("eval_") for k in record)
            if record["step"] % self.print_every and not evaluated:
                return
        text = describe(record, self.total) if self.name == "train" else describe_stage(self.name, record, self.total)
        print(text, flush=True)
        if self.pipes and (event != "step" or "val_loss" in record or any(k.startswith("eval_") for k in record)):
            self.pipes.log(text)

    def materialize(self, metadata: dict[str, Any]) -> None:
        if self.pipes:
            self.pipes.materialize(metadata)

    def close(self, error: BaseException | None = None) -> None:
        if not self.enabled:
            return
        if self.mlflow:
            self.mlflow.flush()
        if self.pipes:
            self.pipes.close(error)
        self.file.close()


def run_reported(out: Path, dist_info, total_steps: int, body: Callable[[Reporter], dict],
                 name: str = "train") -> dict:
    """Run a training body with rank 0's Reporter open; a failure is recorded (torchrun
    exits 1 whatever the worker's status: the reason travels in the records) and re-raised,
    the process group is torn down after success."""
    out.mkdir(parents=True, exist_ok=True)
    report = Reporter(out, dist_info.main, total_steps=total_steps, name=name)
    try:
        metrics = body(report)
    except BaseException as e:
        report(event="error", kind=type(e).__name__, message=str(e))
        report.close(e)
        raise
    report.close()
    import torch.distributed as dist

    if dist.is_initialized():  # several ranks, or FSDP's group of one (model.core.parallel.init)
        dist.destroy_process_group()
    return metrics


def describe(r: dict, total: int = 0) -> str:
    """One readable line per record."""
    event = r.get("event")
    if event == "step":
        parts = [f"step {r['step']}/{total or '?'}", f"loss {r['loss']:.4f}"]
        if "val_loss" in r:
            parts.append(f"val_loss {r['val_loss']:.4f} (ppl {r['val_ppl']:.1f}, {r.get('val_bpb') or 0:.3f} bpb)")
        if "eval_seconds" in r:
            qa = r.get("eval_domain_qa_nll")
            parts.append((f"domain QA {qa:.3f} nats" if qa is not None else "no domain QA pairs")
                         + (f", samples repeat_4 {r['eval_repeat_4_max']:.2f}" if "eval_repeat_4_max" in r else "")
                         + f" ({r['eval_seconds']:.1f} s, {r['eval_time_share']:.1%} of the time)")
        parts += [f"lr {r['lr']:.2e}", f"{r['tokens_per_s']:,.0f} tok/s"]
        if r.get("mfu") is not None:
            parts.append(f"MFU {r['mfu']:.1%}")
        parts.append(f"eta {r['eta_s']:.0f} s")
        return "[train] " + " | ".join(parts)
    if event == "plan":
        return "[train] plan:\n" + r["summary"]
    if event == "estimate":
        return (f"[train] measured {r['seconds_per_step']:.3f} s/step over {r['probe_steps']} steps "
                f"({r['tokens_per_s']:,.0f} tok/s, MFU {r['mfu']:.1%} of {r['peak_flops'] / 1e9:,.0f} GFLOP/s "
                f"{r['peak_source']}): {r['estimated_total_s']:.0f} s for {r['steps']} steps")
    if event == "start":
        return (f"[train] {r['parameters'] / 1e6:.2f}M parameters on {r['world_size']} x {r['device']}, "
                f"{r['tokens_per_step']:,} tokens per step, from step {r['step']}")
    if event == "resume":
        return f"[train] resumed from {r['checkpoint']} at step {r['step']}"
    if event == "checkpoint":
        return f"[train] checkpoint {r['path']}"
    if event == "bad_step":
        return f"[train] step {r['step']}: {r['problem']} (loss {r['loss']}); action: {r['action']}"
    if event == "rollback":
        return (f"[train] rolled back from step {r['step']} to the checkpoint of step {r['to_step']}, past the "
                f"{r['skipped_batches']} batches since it; learning rate x {r['lr_scale']:g}")
    if event == "warning":
        return f"[train] warning: {r['message']}"
    if event == "done":
        return f"[train] done at step {r.get('step')}: " + ", ".join(
            f"{k} {r[k]:.4g}" for k in ("loss", "val_loss", "val_ppl", "val_bpb") if isinstance(r.get(k), float))
    return "[train] " + json.dumps(r)


def describe_stage(name: str, r: dict, total: int = 0) -> str:
    """A post-training stage's line: its own numbers, whatever they are."""
    def fmt(k: str, v) -> str:
        return f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"

    event = r.get("event")
    if event == "step":
        skip = {"event", "step", "time", "elapsed_s", "eta_s"}
        parts = [f"step {r['step']}/{total or '?'}"] + [fmt(k, v) for k, v in r.items()
                                                         if k not in skip and isinstance(v, (int, float))]
        return f"[{name}] " + " | ".join(parts) + f" | eta {r.get('eta_s', 0):.0f} s"
    if event == "plan":
        return f"[{name}] plan:\n" + r["summary"]
    if event == "start":
        return (f"[{name}] {r['parameters'] / 1e6:.2f}M trained parameters on {r['world_size']} x {r['device']}, "
                f"from step {r['step']}")
    if event == "baseline":
        return f"[{name}] before training: " + ", ".join(
            fmt(k, v) for k, v in r.items() if k.startswith("eval_") and isinstance(v, (int, float)))
    if event == "done":
        return f"[{name}] done at step {r.get('step')}: " + ", ".join(
            fmt(k, v) for k, v in r.items() if k.startswith("eval_") and isinstance(v, (int, float)))
    return describe(r, total).replace("[train]", f"[{name}]", 1)
