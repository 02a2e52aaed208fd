"""promoted_model (the export registered in MLflow's model registry, the champion alias
moved to it) and no_regression, the blocking check on exported_model that keeps a worse
export from being promoted. The decisions are stages.evaluation.promotion's."""

import dataclasses

import dagster as dg

from assets.evaluation.report import RATINGS
from assets.training.plan import plan_tags
from resources import MlflowTracking, YunqueSettings
from stages.asset_names import EVAL_REPORT, EXPORTED_MODEL, PROMOTED_MODEL
from stages.config import PromotionConfig
from stages.evaluation.promotion import (
    PROMOTION_CODE_VERSION,
    Candidate,
    PromotionError,
    Verdict,
    candidate,
    champion_path,
    champion_record,
    comparison_markdown,
    decide,
    read_champion,
    write_champion,
)
from stages.store.outputs import DataStore

ARTIFACT_PATH = "model"  # the export's directory inside the promotion run's artifacts
WEIGHTS_TAG = "yunque.weights_sha256"


def _figures(prefix: str, figures: dict) -> dict[str, float]:
    # metadata takes no None: a figure that was not measured is left out
    return {f"{prefix}{k}": float(v) for k, v in figures.items() if isinstance(v, (int, float))}


@dg.asset_check(asset=EXPORTED_MODEL, blocking=True, additional_deps=[EVAL_REPORT],
                description="The export does not regress against the champion (data/promoted_model/champion.json): "
                            "val_bpb <= champion * (1 + promotion.max_bpb_increase) and math_accuracy >= champion - "
                            "promotion.max_accuracy_drop, on eval_report's row for the exported stage. Passes when "
                            "there is no champion yet; blocking: a failure skips promoted_model in the run.")
def no_regression(settings: YunqueSettings) -> dg.AssetCheckResult:
    store, cfg = settings.store(), settings.data_config()
    champion = read_champion(store)
    try:
        cand = candidate(store)
    except PromotionError as e:
        # without figures there is nothing to hold against a champion; the first export
        # passes (promoted_model then fails on the same missing report, naming it)
        return dg.AssetCheckResult(passed=champion is None, description=str(e),
                                   metadata={"verdict": dg.MetadataValue.md(str(e))})
    verdict = decide(cand, champion, cfg.promotion)
    md = {"verdict": dg.MetadataValue.md(comparison_markdown(verdict, cand, champion)),
          "champion_version": str(champion["version"]) if champion else "none",
          **_figures("candidate_", cand.figures), **_figures("champion_", (champion or {}).get("figures", {}))}
    return dg.AssetCheckResult(passed=verdict.passed, metadata=md, description=verdict.reason)


@dg.asset(deps=[EXPORTED_MODEL, EVAL_REPORT, RATINGS], group_name="evaluation", kinds={"mlflow"},
          code_version=PROMOTION_CODE_VERSION)
def promoted_model(context: dg.AssetExecutionContext, settings: YunqueSettings,
                   mlflow: MlflowTracking) -> dg.MaterializeResult:
    """The export registered in MLflow's model registry as a new version of
    promotion.registered_model, with the promotion.alias alias (champion) moved to it and
    data/promoted_model/champion.json rewritten; the export's directory is copied into the
    artifacts of an MLflow run `promotion`, the version's source. The same weights as the
    champion's make no new version. Gated by the no_regression check on exported_model."""
    planned = plan_tags(context, settings)  # what it starts from, for `yunque run`'s up-to-date check
    store, cfg = settings.store(), settings.data_config()
    p = cfg.promotion
    try:
        cand = candidate(store)
    except PromotionError as e:
        raise dg.Failure(str(e)) from e
    champion = read_champion(store)
    verdict = decide(cand, champion, p)
    current = mlflow.aliased_version(p.registered_model, p.alias)
    if current is not None and current["tags"].get(WEIGHTS_TAG) == cand.weights_hash:
        # already the registry's champion: no new version; the record follows the registry
        # (also after a rollback: the alias moved back by hand in MLflow)
        record = champion
        if not champion or champion.get("version") != current["version"]:
            record = champion_record(cand, verdict, current["version"], cfg=p, model_uri=_uri(p),
                                     mlflow_run_id=current["run_id"] or "", previous=champion)
            write_champion(store, record)
        context.log.info(f"{cand.stage} step {cand.step} is version {current['version']} already: not registered")
        return _result(store, cand, verdict, record, champion, new=False, planned=planned)
    if not verdict.passed:  # reached when promoted_model runs without its check (alone)
        raise dg.Failure(f"not promoted: {verdict.reason}",
                         metadata={"verdict": dg.MetadataValue.md(comparison_markdown(verdict, cand, champion))})
    record = _register(context, mlflow, cand, verdict, champion, p)
    write_champion(store, record)
    context.log.info(f"{p.registered_model} version {record['version']} is {p.alias}: {verdict.reason}")
    return _result(store, cand, verdict, record, champion, new=True, planned=planned)


def _uri(p: PromotionConfig) -> str:
    return f"models:/{p.registered_model}@{p.alias}"


def _register(context: dg.AssetExecutionContext, mlflow: MlflowTracking, cand: Candidate, verdict: Verdict,
              champion: dict | None, p: PromotionConfig) -> dict:
    """Log the export into a `promotion` run and register it; the run fails with it."""
    tags = {"dagster.run_id": context.run.run_id, "dagster.asset_key": PROMOTED_MODEL,
            "yunque.stage": cand.stage, WEIGHTS_TAG: cand.weights_hash}
    run_id = mlflow.start_run("promotion", {"promotion": dataclasses.asdict(p)}, tags)
    try:
        mlflow.log_dir(run_id, cand.export_dir, ARTIFACT_PATH)
        version_tags = {WEIGHTS_TAG: cand.weights_hash, "yunque.stage": cand.stage, "yunque.step": str(cand.step),
                        "yunque.export_key": cand.export_key, **{f"yunque.{k}": str(v) for k, v in
                                                                 cand.figures.items() if v is not None}}
        version = mlflow.register_version(p.registered_model, p.alias, run_id, ARTIFACT_PATH, version_tags,
                                          description=verdict.reason)
    except BaseException:
        mlflow.finish(run_id, "FAILED")
        raise
    mlflow.finish(run_id, "FINISHED", metrics={k: v for k, v in cand.figures.items() if v is not None},
                  tags={"yunque.model_version": version})
    return champion_record(cand, verdict, version, cfg=p, model_uri=_uri(p), mlflow_run_id=run_id, previous=champion)


def _result(store: DataStore, cand: Candidate, verdict: Verdict, record: dict, compared_with: dict | None,
            new: bool, planned: dict[str, str]) -> dg.MaterializeResult:
    md = {"version": record["version"], "registered_model": record["registered_model"], "alias": record["alias"],
          "model_uri": record["model_uri"], "new_version": new, "cached": not new,
          "reason": dg.MetadataValue.md(verdict.reason),
          "comparison": dg.MetadataValue.md(comparison_markdown(verdict, cand, compared_with)),
          "stage": cand.stage, "step": cand.step, "weights_sha256": cand.weights_hash,
          "mlflow_run_id": record["mlflow_run_id"], "champion_json": dg.MetadataValue.path(str(champion_path(store))),
          **_figures("", cand.figures)}
    version = dg.DataVersion(f"v{record['version']}-{cand.weights_hash[:12]}")
    return dg.MaterializeResult(metadata=md, data_version=version, tags=planned)
