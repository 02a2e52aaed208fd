"""base_model: pretraining launched as torchrun through Dagster Pipes, tracked in MLflow."""

import json

import dagster as dg

from assets.data.contamination import eval_contamination
from assets.data.tokens import token_shards, tokenizer
from assets.metadata import image, rows_table
from assets.partitions import consumed_shards
from assets.training.factory import training_asset
from model.checkpoint.files import Checkpoint, weights_sha256
from model.checkpoint.files import latest as latest_checkpoint
from resources import CorpusStorage, MlflowTracking, YunqueSettings
from stages.asset_names import BASE_MODEL
from stages.reports import loss_curve
from stages.store.outputs import DataStore
from stages.training import cost
from stages.training.pretrain import CODE_VERSION, prepare
from stages.training.runs import PretrainError, RunEnd, RunSpec, run_end

BEATS_UNIGRAM = "val_loss_below_unigram_entropy"


class Pretraining:
    """base_model's way through the training skeleton (assets.training.factory)."""

    asset = BASE_MODEL
    module = "model.pretrain.train"

    def prepare(self, context: dg.AssetExecutionContext, settings: YunqueSettings, store: DataStore,
                corpus: CorpusStorage) -> RunSpec:
        chosen = consumed_shards(context, settings, corpus, "token_shards")
        if chosen.pending:  # training without them would silently be a model of part of the corpus
            raise dg.Failure(f"shards not encoded yet: {sorted(chosen.pending)}; materialize token_shards for them "
                             "(or remove them from the corpus) first", allow_retries=False)
        try:
            return prepare(store, chosen.ready, settings.data_config(), BASE_MODEL)
        except PretrainError as e:
            raise dg.Failure(str(e), allow_retries=False) from e  # a refusal is the same on every attempt

    def finished(self, spec: RunSpec) -> RunEnd | None:
        # the run's own last step (or its early stop), intact: an older fallback checkpoint would be refused downstream
        try:
            return run_end(spec)
        except PretrainError as e:
            raise dg.Failure(str(e), allow_retries=False) from e

    def consumed(self, end: RunEnd) -> Checkpoint:
        return end.recorded  # the best checkpoint: what eval_report, export and the post-training chain consume

    def nothing_to_do(self, spec: RunSpec, end: RunEnd) -> str:
        return f"{end.last.path} is where this run ended ({end.early_stop or f'its last step, {spec.steps}'}): " \
               "nothing to train"

    def starting(self, spec: RunSpec) -> str:
        est = spec.record().get("estimate")
        return f"{spec.lineage['start']}; steps {spec.start_step}..{spec.steps}" + \
            (f"; {cost.summary(est)}" if est else "")

    def tags(self, spec: RunSpec) -> dict[str, str]:
        newest = latest_checkpoint(spec.dir)
        tags = {"yunque.tokenizer_version": spec.lineage["tokenizer_hash"],
                "yunque.token_shards_versions": json.dumps(spec.lineage["token_shards"], sort_keys=True),
                "yunque.resumed_from_step": str(newest.step if newest else spec.start_step),
                "yunque.start": spec.lineage.get("start", "")}
        if cont := spec.continued_from:
            tags |= {"yunque.continued_from": cont["run_key"], "yunque.continued_from_step": str(cont["step"])}
        return tags | {f"yunque.token_shards.{s}": v for s, v in spec.lineage["token_shards"].items()}

    def plots(self, spec: RunSpec) -> None:
        return None  # the loss curve, which run_program draws by default

    def after_training(self, mlflow: MlflowTracking, spec: RunSpec, end: RunEnd) -> None:
        log_tokens_per_source(mlflow, spec, end)

    def result(self, spec: RunSpec, end: RunEnd, cached: bool, reported: dict, record: dict,
               planned: dict[str, str]) -> dg.MaterializeResult:
        entropy = loss_curve.unigram_entropy(spec.config["train"]["shards"])
        return _result(spec, end, cached, entropy, reported, planned)


base_model = training_asset(
    Pretraining(), deps=[tokenizer, token_shards, eval_contamination], group_name="training", code_version=CODE_VERSION, check=BEATS_UNIGRAM,
    description="A decoder-only transformer pretrained on the token shards' training split, with validation loss, "
                "perplexity and bits per byte; checkpoints under data/base_model/ (the directory resolves to its "
                "latest intact checkpoint). When only the shards changed since a finished run, it continues that "
                "run on the new shards with a replay of the old.")


def log_tokens_per_source(mlflow: MlflowTracking, spec: RunSpec, end: RunEnd) -> None:
    """The tokens this run drew from each source of its mixture (new/replay groups too),
    as MLflow metrics `tokens_per_source.<source>` at its last step, beside the mixture in
    the params (train.mixture)."""
    drawn = end.last.state().get("tokens_per_source") or {}
    runs = spec.record().get("mlflow_runs", [])
    if drawn and runs:
        mlflow.log_metrics(runs[-1], {f"tokens_per_source.{k}": float(v) for k, v in drawn.items()},
                           step=end.last.step)


def _result(spec: RunSpec, end: RunEnd, cached: bool, entropy: float, reported: dict,
            planned: dict[str, str]) -> dg.MaterializeResult:
    latest = end.recorded  # the best checkpoint: its metrics are the model's the stages consume
    state = latest.state()
    m = state.get("metrics", {})
    records = loss_curve.read_metrics(spec.dir)
    plan = next((r for r in reversed(records) if r.get("event") == "plan"), {})
    estimate = next((r for r in reversed(records) if r.get("event") == "estimate"), {})
    mlflow_runs = spec.record().get("mlflow_runs", [])
    md = {
        **reported,
        "checkpoint": dg.MetadataValue.path(str(latest.path)), "step": latest.step, "cached": cached,
        "last_checkpoint": dg.MetadataValue.path(str(end.last.path)), "last_step": end.last.step,
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
    if end.early_stop:
        md["early_stop"] = end.early_stop
    md |= _divergence(records)
    if est := spec.record().get("estimate"):
        md["cost_estimate"] = rows_table(est["rows"])
        if not cached:  # the time this materialization's run took, against what was estimated for it
            md |= {f"time_{k}": v for k, v in cost.compared(est, records).items()}
    md |= continuation(spec, state)
    if rows := loss_curve.eval_rows(records):
        md["loss_curve"] = rows_table(rows)
    if rows := loss_curve.downstream_rows(records):  # the evaluations during training, with their cost
        md["downstream_evals"] = rows_table(rows)
        md["downstream_time_share"] = rows[-1]["time_share"]
    if (spec.dir / "loss_curve.png").exists():
        md["loss_curve_png"] = image(spec.dir / "loss_curve.png", "base_model loss curve")
    val = m.get("val_loss")
    check = dg.AssetCheckResult(
        check_name=BEATS_UNIGRAM, passed=bool(val is not None and val < entropy), severity=dg.AssetCheckSeverity.WARN,
        metadata={"val_loss": float(val) if val is not None else float("nan"), "unigram_entropy": float(entropy)},
        description="a model that learned anything from context has a validation loss well below the entropy "
                    "of the training tokens' unigram distribution")
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(weights_sha256(latest.path)[:20]),
                                check_results=[check], tags=planned)


def _divergence(records: list[dict]) -> dict:
    """The run's bad steps (non-finite, spikes) and rollbacks, as the program recorded them
    (model.pretrain.divergence): counts, and a table of the events when there were any."""
    events = [r for r in records if r.get("event") in ("bad_step", "rollback")]
    md: dict = {"bad_steps": sum(r["event"] == "bad_step" for r in events),
                "rollbacks": sum(r["event"] == "rollback" for r in events)}
    if events:
        md["divergence_events"] = rows_table([
            {"step": r["step"], "event": r["event"],
             "detail": (f"{r['problem']}; action {r['action']}" if r["event"] == "bad_step" else
                        f"back to step {r['to_step']}, {r['skipped_batches']} batches skipped, "
                        f"learning rate x {r['lr_scale']:g}")} for r in events])
    return md


def continuation(spec: RunSpec, state: dict) -> dict:
    """How the run started (fresh, and why, or continued from which run), its steps and
    the mixture of source groups it read, with the tokens this run drew from each."""
    md: dict = {"start": spec.lineage.get("start", ""), "start_step": spec.start_step,
                "step_range": f"{spec.start_step}..{spec.steps}"}
    if cont := spec.continued_from:
        md["continued_from"] = dg.MetadataValue.json(cont)
    drawn = state.get("tokens_per_source") or {}
    sources = spec.lineage.get("sources") or []
    if sources:
        if not drawn:  # a fresh run without a mixture reads one group: all it trained on came from it
            drawn = {sources[0]["name"]: state.get("tokens_seen", 0)}
        md["mixture"] = rows_table([
            {"source": g["name"], "shards": ", ".join(g["shards"]), "weight": float(g["weight"]),
             "train_tokens": int(g["train_tokens"]), "tokens_drawn": int(drawn.get(g["name"], 0)),
             "epochs": round(drawn.get(g["name"], 0) / g["train_tokens"], 4) if g["train_tokens"] else 0.0}
            for g in sources])
        md |= {f"tokens_per_source.{k}": int(v) for k, v in (state.get("tokens_per_source") or {}).items()}
    return md
