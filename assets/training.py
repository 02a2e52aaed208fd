"""base_model: pretraining launched as torchrun through Dagster Pipes, tracked in MLflow."""

import json

import dagster as dg
from dagster._core.errors import DagsterPipesExecutionError  # not exported at the top level

from assets.metadata import rows_table
from assets.partitions import shards as shards_def
from assets.tokens import token_shards, tokenizer
from pipelines import loss_curve
from pipelines.pretrain_stage import (
    BASE_MODEL,
    CODE_VERSION,
    PretrainError,
    RunSpec,
    prepare,
    read_metrics,
    unigram_entropy,
)
from resources import MlflowTracking, TorchrunLauncher, YunqueSettings
from yunque.env import TELEMETRY_OFF

# Training assets share one pool: with `pools: default_limit: 1` in dagster.yaml a
# machine never runs two trainings on the same devices at once.
TRAINING_POOL = "training"

# The supervisor's own exit codes (model.launch); torchrun turns every worker failure into 1,
# so the training program's reason is read from its last records instead.
EXIT_REASONS = {124: "stopped: the run exceeded TorchrunLauncher.timeout_s", 130: "interrupted"}
ERROR_KINDS = {"PreflightError": "refused by the preflight plan", "TrainingStopped": "training stopped on a bad step"}


def _encoded_shards(context: dg.AssetExecutionContext, settings: YunqueSettings) -> list[str]:
    store = settings.store()
    registered = context.instance.get_dynamic_partitions(shards_def.name)
    return [s for s in registered if store.manifest("token_shards", s) is not None]


def _latest(spec: RunSpec):
    from model import checkpoint as ckpt  # torch: only when a model is involved

    return ckpt.latest(spec.dir)


def _failure(spec: RunSpec, error: Exception) -> dg.Failure:
    """The training program's own explanation, from the records it left."""
    records = read_metrics(spec.dir)
    starts = [i for i, r in enumerate(records) if r.get("event") == "plan"]
    this_attempt = records[starts[-1]:] if starts else []
    err = next((r for r in reversed(this_attempt) if r.get("event") == "error"), None)
    code = next((c for c in EXIT_REASONS if str(error).endswith(f"code {c}")), None)
    if code is not None:
        detail = EXIT_REASONS[code]
    elif err is not None:
        detail = f"{ERROR_KINDS.get(err['kind'], err['kind'])}:\n{err['message']}"
    else:
        detail = f"{error} (the training program left no reason: see its stderr in the run's logs)"
    return dg.Failure(f"base_model: {detail}\n(records in {spec.dir / 'metrics.jsonl'})")


BEATS_UNIGRAM = "val_loss_below_unigram_entropy"


@dg.asset(deps=[tokenizer, token_shards], group_name="training", kinds={"pytorch", "mlflow"}, pool=TRAINING_POOL,
          code_version=CODE_VERSION, check_specs=[dg.AssetCheckSpec(BEATS_UNIGRAM, asset=BASE_MODEL)])
def base_model(context: dg.AssetExecutionContext, settings: YunqueSettings, launcher: TorchrunLauncher,
               mlflow: MlflowTracking) -> dg.MaterializeResult:
    """A decoder-only transformer pretrained on the token shards' training split, with
    validation loss, perplexity and bits per byte; checkpoints under data/base_model/
    (the directory resolves to its latest intact checkpoint)."""
    store = settings.store()
    cfg = settings.data_config()
    try:
        spec = prepare(store, _encoded_shards(context, settings), cfg, BASE_MODEL)
    except PretrainError as e:
        raise dg.Failure(str(e)) from e
    entropy = unigram_entropy(spec.config["train"]["shards"])
    latest = _latest(spec)
    cached = latest is not None and latest.step >= spec.steps
    reported = {}
    if cached:
        context.log.info(f"{latest.path} is this run's last step ({spec.steps}): nothing to train")
    else:
        reported = _train(context, spec, launcher, mlflow, resumed_from=latest.step if latest else 0)
        latest = _latest(spec)
        if latest is None:
            raise dg.Failure(f"training finished but left no intact checkpoint under {spec.dir}")
    return _result(spec, latest, cached, entropy, reported)


def _train(context: dg.AssetExecutionContext, spec: RunSpec, launcher: TorchrunLauncher, mlflow: MlflowTracking,
           resumed_from: int) -> dict:
    """Run the training program; what rank 0 reported as the materialization's metadata."""
    tags = {"dagster.run_id": context.run.run_id, "dagster.asset_key": context.asset_key.to_user_string(),
            "yunque.run_key": spec.key, "yunque.tokenizer_version": spec.lineage["tokenizer_hash"],
            "yunque.token_shards_versions": json.dumps(spec.lineage["token_shards"], sort_keys=True),
            "yunque.resumed_from_step": str(resumed_from)}
    tags |= {f"yunque.token_shards.{s}": v for s, v in spec.lineage["token_shards"].items()}
    run_id = mlflow.start_run(f"{spec.asset}-{spec.key[:8]}", {**spec.config, "lineage": spec.lineage}, tags)
    spec.add_mlflow_run(run_id)
    context.log.info(f"MLflow run {run_id} ({mlflow.uri()}); checkpoints in {spec.dir}")
    cmd = launcher.command("model.train", "--config", str(spec.config_path))
    status = "FAILED"
    try:
        done = launcher.client().run(context=context, command=cmd, env={**TELEMETRY_OFF, **mlflow.env(run_id)})
        reported = dict(done.get_materialize_result().metadata or {})
        status = "FINISHED"
        return reported
    except DagsterPipesExecutionError as e:
        raise _failure(spec, e) from e
    except dg.DagsterExecutionInterruptedError:
        status = "KILLED"  # the run was cancelled; model.launch stopped the whole process tree
        raise
    finally:
        png = loss_curve.plot(read_metrics(spec.dir), spec.dir / "loss_curve.png", f"{spec.asset} {spec.key[:8]}")
        mlflow.finish(run_id, status, artifacts=[spec.config_path, spec.dir / "run.json", spec.dir / "metrics.jsonl",
                                             *([png] if png else [])])


def _result(spec: RunSpec, latest, cached: bool, entropy: float, reported: dict) -> dg.MaterializeResult:
    state = latest.state()
    m = state.get("metrics", {})
    records = read_metrics(spec.dir)
    plan = next((r for r in reversed(records) if r.get("event") == "plan"), {})
    estimate = next((r for r in reversed(records) if r.get("event") == "estimate"), {})
    checksums = json.loads((latest.path / "checksums.json").read_text())
    mlflow_runs = spec.record().get("mlflow_runs", [])
    md = {
        **reported,
        "checkpoint": dg.MetadataValue.path(str(latest.path)), "step": latest.step, "cached": cached,
        "run_key": spec.key, "mlflow_run_id": mlflow_runs[-1] if mlflow_runs else "",
        "parameters": plan.get("parameters", 0), "tokens_seen": state.get("tokens_seen", 0),
        "unigram_entropy": round(entropy, 4),
        "lineage": dg.MetadataValue.json({**spec.lineage, "mlflow_runs": mlflow_runs}),
        "config": dg.MetadataValue.json(spec.config),
    }
    md |= {k: round(float(m[k]), 4) for k in ("loss", "val_loss", "val_ppl", "val_bpb", "tokens_per_s", "mfu")
           if isinstance(m.get(k), (int, float))}
    if plan:
        md["plan"] = dg.MetadataValue.md("```\n" + plan["summary"] + "\n```")
    if estimate:
        md["estimated_seconds"] = round(estimate["estimated_total_s"], 1)
    if rows := loss_curve.eval_rows(records):
        md["loss_curve"] = rows_table(rows)
    if (spec.dir / "loss_curve.png").exists():
        md["loss_curve_png"] = dg.MetadataValue.path(str(spec.dir / "loss_curve.png"))
    val = m.get("val_loss")
    check = dg.AssetCheckResult(
        check_name=BEATS_UNIGRAM, passed=bool(val is not None and val < entropy), severity=dg.AssetCheckSeverity.WARN,
        metadata={"val_loss": float(val) if val is not None else float("nan"), "unigram_entropy": float(entropy)},
        description="a model that learned anything from context has a validation loss well below the entropy "
                    "of the training tokens' unigram distribution")
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(checksums["model.safetensors"][:20]),
                                check_results=[check])
