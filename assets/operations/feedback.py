"""Carrying the chat page's ratings to a model: the align_on_feedback job (human_preferences
and everything downstream of it) and the feedback_sensor that starts it when enough ratings
wait that no trained model holds (off by default, like the training schedule). The
promotion gate then decides whether the result becomes the champion."""

import dagster as dg

from assets.operations.automation import IN_PROGRESS
from resources import YunqueSettings
from stages.asset_names import HUMAN_PREFERENCES

align_job = dg.define_asset_job(
    "align_on_feedback", selection=dg.AssetSelection.assets(HUMAN_PREFERENCES).downstream(),
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
    from stages.training.lineage import ratings_in_models

    busy = context.instance.get_runs(filters=dg.RunsFilter(job_name=align_job.name, statuses=IN_PROGRESS), limit=1)
    if busy:  # it reads the ratings at its start: the next tick counts what came after
        return dg.SkipReason(f"an {align_job.name} run is in progress ({busy[0].run_id})")
    store = settings.store()
    wait = waiting(store, ratings_in_models(store))
    total, new = wait["ratings"], wait["waiting"]
    need = settings.data_config().feedback.min_new_ratings
    if new < need:
        return dg.SkipReason(f"{new} new rating(s) of {need} needed (feedback.min_new_ratings): {total} in all, "
                             f"the first {wait['trained']} in the trained models")
    # one run per count of ratings: a tick that sees the same ratings does not request it twice
    return dg.RunRequest(run_key=f"ratings-{total}", tags={"yunque/new_ratings": str(new)})
