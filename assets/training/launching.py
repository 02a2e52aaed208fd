"""Launching a training program (pretraining or a post-training stage) from an asset:
torchrun through Dagster Pipes under the TorchrunLauncher, one MLflow run per attempt,
and the program's own reason when it fails. Every run carries the chain's lineage as tags
(stages.training.lineage.lineage_tags); its params are the recipe."""

from collections.abc import Callable
from pathlib import Path

import dagster as dg
from dagster._core.errors import DagsterPipesExecutionError  # not exported at the top level

from resources import MlflowTracking, TorchrunLauncher
from resources.telemetry import TELEMETRY_OFF
from stages.reports import loss_curve
from stages.reports.loss_curve import read_metrics
from stages.store.outputs import DataStore
from stages.training.lineage import lineage_tags, planned_record
from stages.training.runs import RunSpec

# Training assets share one pool: with `pools: default_limit: 1` in dagster.yaml a
# machine never runs two trainings on the same devices at once.
TRAINING_POOL = "training"

# The supervisor's own exit codes (model.launch.supervise); torchrun turns every worker failure into 1,
# so the training program's reason is read from its last records instead.
EXIT_REASONS = {124: "stopped: the run exceeded TorchrunLauncher.timeout_s", 130: "interrupted"}
ERROR_KINDS = {"PreflightError": "refused by the preflight plan", "TrainingStopped": "training stopped on a bad step"}
# a refusal by the plan is the same on every attempt: not worth an asset's retry policy
NOT_RETRIED = {"PreflightError"}


def failure(spec: RunSpec, error: Exception) -> dg.Failure:
    """The training program's own explanation, from the records it left."""
    records = read_metrics(spec.dir)
    starts = [i for i, r in enumerate(records) if r.get("event") == "plan"]
    this_attempt = records[starts[-1]:] if starts else records
    err = next((r for r in reversed(this_attempt) if r.get("event") == "error"), None)
    code = next((c for c in EXIT_REASONS if str(error).endswith(f"code {c}")), None)
    if code is not None:
        detail = EXIT_REASONS[code]
    elif err is not None:
        detail = f"{ERROR_KINDS.get(err['kind'], err['kind'])}:\n{err['message']}"
    else:
        detail = f"{error} (the training program left no reason: see its stderr in the run's logs)"
    retry = not (code is None and err is not None and err["kind"] in NOT_RETRIED)
    return dg.Failure(f"{spec.asset}: {detail}\n(records in {spec.dir / 'metrics.jsonl'})", allow_retries=retry)


def run_program(context: dg.AssetExecutionContext, spec: RunSpec, launcher: TorchrunLauncher,
                mlflow: MlflowTracking, module: str, tags: dict[str, str],
                plots: Callable[[], list[Path]] | None = None, store: DataStore | None = None) -> dict:
    """Run `python -m module --config <spec.config_path>` under torchrun; what rank 0
    reported as the materialization's metadata. The run directory goes to the store
    (`store.publish`: a remote home) whether the training finished or not."""
    store = store or DataStore(spec.dir.parent.parent)  # spec.dir is <home>/data/<asset> (DataStore.dir)
    tags = {"dagster.run_id": context.run.run_id, "dagster.asset_key": context.asset_key.to_user_string(),
            "yunque.run_key": spec.key, **lineage_tags(store, planned_record(store, spec)), **tags}
    # params are the recipe; the lineage (records, hashes) is in the tags, where runs are searched by it
    params = {k: v for k, v in spec.config.items() if k != "lineage"}
    run_id = mlflow.start_run(f"{spec.asset}-{spec.key[:8]}", params, tags)
    spec.add_mlflow_run(run_id)
    context.log.info(f"MLflow run {run_id} ({mlflow.display_uri()}); checkpoints in {spec.dir}")
    cmd = launcher.command(module, "--config", str(spec.config_path))
    # several nodes: the launch spec (in the store, for a remote home), how to join
    if lines := launcher.prepare_nodes(spec, module, store.home, shown_home=store.url):
        store.publish(spec.asset)
    for line in lines:
        context.log.info(line)
    status = "FAILED"
    try:
        done = launcher.client().run(context=context, command=cmd, env={**TELEMETRY_OFF, **mlflow.env(run_id)})
        reported = dict(done.get_materialize_result().metadata or {})
        status = "FINISHED"
        return reported
    except DagsterPipesExecutionError as e:
        raise failure(spec, e) from e
    except dg.DagsterExecutionInterruptedError as e:
        status = "KILLED"  # the run was cancelled; model.launch.supervise stopped the whole process tree
        # Dagster retries an interrupted step under a RetryPolicy (meant for preemption), which
        # would start the training of a cancelled run again: end it as a failure never retried.
        raise dg.Failure(f"{spec.asset}: cancelled; the training process tree was stopped",
                         allow_retries=False) from e
    finally:
        if plots is not None:
            pngs = plots()
        else:
            png = loss_curve.plot(read_metrics(spec.dir), spec.dir / "loss_curve.png", f"{spec.asset} {spec.key[:8]}")
            pngs = [png] if png else []
        mlflow.finish(run_id, status, artifacts=[spec.config_path, spec.dir / "run.json", spec.dir / "metrics.jsonl",
                                             *pngs])
        store.publish(spec.asset)
