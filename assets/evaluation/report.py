"""eval_report: one table across every checkpoint, with its alarms as checks."""

import dataclasses

import dagster as dg

from assets.metadata import image, rows_table
from assets.training.launching import TRAINING_POOL
from assets.training.plan import plan_tags
from assets.training.post_training import dpo_model, grpo_model, ppo_model, sft_model
from assets.training.pretrain import base_model
from resources import MlflowTracking, YunqueSettings
from stages.asset_names import EVAL_CONTAMINATION, EVAL_REPORT, HUMAN_PREFERENCES
from stages.evaluation.evaluate import EVAL_CODE_VERSION, evaluate_all
from stages.evaluation.promotion import FIGURES
from stages.store.keys import cache_key
from stages.store.outputs import DataStore
from stages.training.lineage import LineageError, lineage_tags

# The checkpoint assets the report and the export read, in chain order (the reward model
# is not a language model to evaluate: its held-out accuracy is in its own metadata).
CHECKPOINT_ASSETS = [base_model, sft_model, dpo_model, ppo_model, grpo_model]
# a new ratings version marks the report, the export and the promotion stale at once
# (Dagster marks only an asset's direct children; assets.training.post_training)
RATINGS = dg.AssetKey(HUMAN_PREFERENCES)

ALARMS = {
    "val_loss_rising": "validation loss has risen above its minimum by more than 0.01 nats (passes when early "
                       "stopping acted: the stage consumes its best checkpoint, named in the details)",
    "overfitting": "training loss fell over the last evaluations while validation loss did not",
    "repetition": "a generation sample repeats its own 4-grams more than eval.repetition_threshold",
    "outdated_chain": "the stage was trained from a parent that has been retrained since (re-materialize the "
                      "stages named, parents first)",
}
NUMERIC = ("val_loss", "val_ppl", "val_bpb", "domain_qa_nll", "domain_qa_ppl", "math_accuracy", "math_rephrased",
           "format_rate",
           "distinct_2", "repeat_4_max")
# The UI plots every int/float metadata entry across materializations (the asset's Plots
# tab): the only numbers on eval_report are the figures promotion judges (FIGURES), of the
# chain's last stage (the one exported_model exports), as `last_stage/<figure>`; every
# stage's figures are the `figures by checkpoint` table and the `figures` JSON
# ({stage: {figure: value}}, what a terminal reads).
LAST_STAGE = "last_stage"
# report.plots' files (by stem) as labelled entries: the UI shows an image behind
# "[Show Markdown]" beside its key, and titles the opened plot with the key
PLOTS = {"loss_curves": "loss by step, every stage (training and validation)",
         "math_accuracy": "held-out math accuracy by checkpoint"}


def _checks(report: dict) -> list[dg.AssetCheckResult]:
    out = []
    for name, description in ALARMS.items():
        fired = {stage: a[name]["detail"] for stage, a in report["alarms"].items() if a[name]["fired"]}
        details = {stage: a[name]["detail"] for stage, a in report["alarms"].items()}
        out.append(dg.AssetCheckResult(check_name=name, passed=not fired, severity=dg.AssetCheckSeverity.WARN,
                                       description=description, metadata={"stages": dg.MetadataValue.json(details)}))
    return out


# eval_contamination chooses the held-out domain QA pairs the report scores (the clean ones)
@dg.asset(deps=[*CHECKPOINT_ASSETS, dg.AssetKey(EVAL_CONTAMINATION), RATINGS], group_name="evaluation",
          kinds={"pytorch", "mlflow"}, pool=TRAINING_POOL,
          code_version=EVAL_CODE_VERSION, check_specs=[dg.AssetCheckSpec(n, asset=EVAL_REPORT) for n in ALARMS])
def eval_report(context: dg.AssetExecutionContext, settings: YunqueSettings,
                mlflow: MlflowTracking) -> dg.MaterializeResult:
    """Every checkpoint that exists (base now; SFT, DPO, PPO, GRPO once trained), measured the
    same way: validation loss / perplexity / bits per byte, sampled continuations with
    repetition measures, held-out math accuracy (greedy, `<answer>` tags), the domain
    question-answering score (NLL of held-out answers from validation documents). Report in
    data/eval_report/ (markdown, JSON, plots), also logged to MLflow."""
    planned = plan_tags(context, settings)  # what it starts from, for `yunque run`'s up-to-date check
    store, cfg = settings.store(), settings.data_config()
    try:
        result = evaluate_all(store, cfg, progress=context.log.info)
    except (FileNotFoundError, LineageError) as e:
        raise dg.Failure(str(e)) from e
    report, paths = result["report"], result["paths"]
    tags = {"dagster.run_id": context.run.run_id, "dagster.asset_key": EVAL_REPORT,
            **_lineage(store, result["records"]),
            "yunque.outdated": ",".join(s for s, row in report["rows"].items() if row["outdated"])}
    for stage, row in report["rows"].items():
        tags |= {f"yunque.checkpoint.{stage}": row["checkpoint"], f"yunque.mlflow_run.{stage}": row["mlflow_run_id"]}
    run_id = mlflow.start_run(EVAL_REPORT, {"eval": dataclasses.asdict(cfg.eval)}, tags)
    # the fixed figures and every harness task's (<task>.acc, <task>.acc_norm)
    mlflow.log_metrics(run_id, {f"{r['stage']}.{c}": v for r in report["table"] for c, v in r.items()
                                if (c in NUMERIC or c.endswith((".acc", ".acc_norm")))
                                and isinstance(v, (int, float)) and not isinstance(v, bool)})
    mlflow.finish(run_id, "FINISHED", artifacts=list(paths.values()))
    figures = {r["stage"]: {c: r[c] for c in NUMERIC if _number(r[c])} for r in report["table"]}
    last = report["table"][-1]
    titles = {k: PLOTS.get(k, k.replace("_", " ")) for k, p in paths.items() if p.suffix == ".png"}
    md = {
        "report": dg.MetadataValue.md(paths["markdown"].read_text()),
        **{f"plot: {title}": image(paths[k], title) for k, title in titles.items()},
        "figures by checkpoint": rows_table(report["table"]),
        "figures": dg.MetadataValue.json(figures),
        LAST_STAGE: last["stage"],
        **{f"{LAST_STAGE}/{c}": last[c] for c in FIGURES if _number(last[c])},
        "report_json": dg.MetadataValue.path(str(paths["json"])),
        "stages": list(report["rows"]), "reused_rows": result["reused"], "mlflow_run_id": run_id,
        "cached": len(result["reused"]) == len(report["rows"]),
        "outdated": [s for s, row in report["rows"].items() if row["outdated"]],
        "not_evaluated": dg.MetadataValue.json(result["skipped"]),
    }
    version = cache_key(*(row.get("eval_key", "") for row in report["rows"].values()))
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(version), check_results=_checks(report),
                                tags=planned)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _lineage(store: DataStore, records: dict[str, dict]) -> dict[str, str]:
    """The lineage tags of every evaluated stage: the most downstream first, so that each
    stage's own current record wins over the older copy of it an outdated stage carries."""
    tags: dict[str, str] = {}
    for rec in reversed(list(records.values())):
        tags |= lineage_tags(store, rec)
    return tags
