"""eval_report (one table across every checkpoint) and exported_model (Hugging Face + GGUF)."""

import dataclasses

import dagster as dg

from assets.launching import TRAINING_POOL
from assets.metadata import image, rows_table
from assets.model_plan import plan_tags
from assets.post_training import dpo_model, grpo_model, ppo_model, sft_model
from assets.training import base_model
from resources import MlflowTracking, YunqueSettings
from stages.evaluation.evaluate import (
    EVAL_CODE_VERSION,
    EVAL_REPORT,
    EXPORTED_MODEL,
    evaluate_all,
    export_latest,
)
from stages.evaluation.promotion import FIGURES
from stages.store.keys import cache_key
from stages.store.outputs import DataStore
from stages.training.lineage import LineageError, chain, lineage_tags

# The checkpoint assets the report and the export read, in chain order (the reward model
# is not a language model to evaluate: its held-out accuracy is in its own metadata).
CHECKPOINT_ASSETS = [base_model, sft_model, dpo_model, ppo_model, grpo_model]
# a new ratings version marks the report, the export and the promotion stale at once
# (Dagster marks only an asset's direct children; assets.post_training)
RATINGS = dg.AssetKey("human_preferences")

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
@dg.asset(deps=[*CHECKPOINT_ASSETS, dg.AssetKey("eval_contamination"), RATINGS], group_name="evaluation",
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


TRANSFORMERS_MATCH = "transformers_logits_match"
GGUF_MATCH = "gguf_logits_match"


@dg.asset(deps=[*CHECKPOINT_ASSETS, RATINGS], group_name="evaluation", kinds={"pytorch", "huggingface"},
          check_specs=[dg.AssetCheckSpec(TRANSFORMERS_MATCH, asset=EXPORTED_MODEL),
                       dg.AssetCheckSpec(GGUF_MATCH, asset=EXPORTED_MODEL)])
def exported_model(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """The last checkpoint of the chain as a Hugging Face directory (LlamaForCausalLM,
    safetensors, tokenizer with chat template) that transformers and vLLM load, plus GGUF
    files (f16, q8_0, q4_0) for llama.cpp; checked by loading them back in transformers."""
    planned = plan_tags(context, settings)
    store, cfg = settings.store(), settings.data_config()
    try:
        record = export_latest(store, cfg)
    except (FileNotFoundError, LineageError) as e:
        raise dg.Failure(str(e)) from e
    results = record["checks"]
    context.log.info(f"{record['stage']} step {record['step']} in {record['dir']}"
                     f"{' (unchanged, not re-exported)' if record['cached'] else ''}; loaded back in transformers")
    checks = [dg.AssetCheckResult(
        check_name=TRANSFORMERS_MATCH, passed=results["hf"]["passed"], metadata=results["hf"],
        description="transformers' LlamaForCausalLM on the export gives our logits for the weights it stores "
                    "(max abs diff <= 1e-4 in fp32) and our greedy tokens")]
    gguf = {k: v for k, v in results.items() if k != "hf"}
    checks.append(dg.AssetCheckResult(
        check_name=GGUF_MATCH, passed=all(v["passed"] for v in gguf.values()),
        severity=dg.AssetCheckSeverity.WARN, metadata={"files": dg.MetadataValue.json(gguf)},
        description="each GGUF file, loaded by transformers (gguf_file=), gives our logits for the weights as "
                    "stored (max abs diff <= 1e-4) and stays within its quantization's tolerance of the "
                    "full-precision model" if gguf else "no GGUF files configured (export.gguf is empty)"))
    md = {"dir": dg.MetadataValue.path(record["dir"]), "stage": record["stage"], "step": record["step"],
          "checkpoint": dg.MetadataValue.path(record["checkpoint"]), "architecture": record["architecture"],
          "files": dg.MetadataValue.json(record["files"]),
          "max_abs_logit_diff": results["hf"]["max_abs_diff"], "cached": record["cached"],
          "weights_sha256": record["source"]["weights_sha256"],
          "lineage": dg.MetadataValue.json({r["asset"]: r["weights_sha256"] for r in chain(record["lineage"])}),
          "load": dg.MetadataValue.md(f"```python\nAutoModelForCausalLM.from_pretrained({record['dir']!r})\n```")}
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(record["export_key"][:20]),
                                check_results=checks, tags=planned)
