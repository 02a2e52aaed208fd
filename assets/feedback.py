"""Human feedback into alignment: human_preferences (the chat page's ratings as preference
pairs and SFT conversations, stages.data.human_preferences), the align_on_feedback job,
and the feedback_sensor that starts it when enough new ratings arrived (off by default,
like the training schedule). The promotion gate then decides whether the result becomes
the champion."""

import dagster as dg

from assets.automation import IN_PROGRESS
from resources import YunqueSettings
from stages.data.human_preferences import CODE_VERSION

ASSET = "human_preferences"


@dg.asset(group_name="feedback", kinds={"json"}, code_version=CODE_VERSION)
def human_preferences(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """The ratings people gave on the chat page (`yunque serve`), read from the home's
    feedback folder: a compare with a winner becomes a preference pair, an edited answer a
    pair over each shown answer and an SFT conversation, a winner or a thumbs-up an SFT
    conversation. sft_model, reward_model and dpo_model mix them with their synthetic data
    (`post.<stage>.human_weight`); the version is a hash of the ratings, and their lineage
    names it. With no ratings yet it materializes empty and changes nothing downstream.

    Its metadata says how many ratings no trained model holds yet (`ratings_waiting`, by
    the model version that wrote the answers). Materializing it by hand uses nothing up:
    the feedback sensor counts the ratings the trained models hold, not the ones read here.
    Every asset from `sft_model` to `promoted_model` depends on it, so a new ratings
    version marks them all stale."""
    from assets.metadata import rows_table
    from stages.data.human_preferences import SUMMARY_FILE, build, waiting

    store = settings.store()
    s = build(store)
    wait = waiting(store, _trained(store))
    for line in s["skipped_lines"][:20]:
        context.log.warning(f"not a rating, skipped: {line}")
    out = store.dir(ASSET)
    counts = [{"record gave": k, "records": v} for k, v in s["records"].items()]
    models = [{"model": k, "answers": v} for k, v in s["models"].items()]
    waits = [{"answers by": k, "ratings waiting": v} for k, v in wait["by_model"].items()]
    context.log.info(f"{wait['waiting']} of {wait['ratings']} rating(s) are in no trained model yet; the models "
                     f"hold the first {wait['trained']}")
    return dg.MaterializeResult(
        metadata={"feedback_version": s["version"], "cached": s["cached"], "ratings": s["ratings"],
                  "ratings_waiting": wait["waiting"], "ratings_in_models": wait["trained"],
                  "waiting_by_model": rows_table(waits) if waits else dg.MetadataValue.json({}),
                  "preference_pairs": s["pairs"],
                  "sft_conversations": s["sft"], "skipped_lines": len(s["skipped_lines"]),
                  "newest_rating": s["newest"] or "-",
                  "records": rows_table(counts) if counts else dg.MetadataValue.json({}),
                  "models": rows_table(models) if models else dg.MetadataValue.json({}),
                  "feedback_dir": dg.MetadataValue.path(s["feedback_dir"]),
                  "summary": dg.MetadataValue.path(str(out / SUMMARY_FILE))},
        data_version=dg.DataVersion(s["version"]))


align_job = dg.define_asset_job(
    "align_on_feedback", selection=dg.AssetSelection.assets(ASSET).downstream(),
    description="Turn the chat page's ratings into training data (human_preferences), retrain the alignment chain "
                "on it mixed with the synthetic data (sft_model, reward_model, dpo_model, then ppo and grpo from "
                "them), evaluate, export, and promote the export if it does not regress against the champion.",
)


def feedback_sensor(interval_s: int = 60) -> dg.SensorDefinition:
    @dg.sensor(name="feedback_sensor", job=align_job, minimum_interval_seconds=interval_s,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Off by default: turn it on to carry ratings to a model. Every "
                           f"{interval_s} s it counts the ratings in the home's feedback folder that no trained "
                           "model holds yet; at feedback.min_new_ratings or more (10 by default) "
                           "it runs align_on_feedback, whose promotion check decides whether the result becomes "
                           "the champion.")
    def _sensor(context: dg.SensorEvaluationContext, settings: YunqueSettings) -> dg.RunRequest | dg.SkipReason:
        return feedback_tick(context, settings)

    return _sensor


def feedback_tick(context: dg.SensorEvaluationContext, settings: YunqueSettings) -> dg.RunRequest | dg.SkipReason:
    from stages.data.human_preferences import waiting

    busy = context.instance.get_runs(filters=dg.RunsFilter(job_name=align_job.name, statuses=IN_PROGRESS), limit=1)
    if busy:  # it reads the ratings at its start: the next tick counts what came after
        return dg.SkipReason(f"an {align_job.name} run is in progress ({busy[0].run_id})")
    store = settings.store()
    wait = waiting(store, _trained(store))
    total, new = wait["ratings"], wait["waiting"]
    need = settings.data_config().feedback.min_new_ratings
    if new < need:
        return dg.SkipReason(f"{new} new rating(s) of {need} needed (feedback.min_new_ratings): {total} in all, "
                             f"the first {wait['trained']} in the trained models")
    # one run per count of ratings: a tick that sees the same ratings does not request it twice
    return dg.RunRequest(run_key=f"ratings-{total}", tags={"yunque/new_ratings": str(new)})


def _trained(store) -> int:
    """The ratings the current alignment models were trained on (their records' lineage)."""
    from stages.training.lineage import ratings_in_models
    from stages.training.post_train import CHAIN

    return ratings_in_models(store, list(CHAIN))
