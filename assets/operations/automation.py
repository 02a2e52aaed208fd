"""New data all the way to a model: the training job and the schedule that starts it.

The data half runs by itself (the shard sensor and the automation conditions, on by
default). Training is off by default: one switch in the UI (Automation > train_on_new_data)
turns it on. Each tick then asks whether token shards exist that the materialized base
model has not trained on; if so it runs base_model (which continues pretraining from the
last base checkpoint on a mix of new and old shards), the post-training chain, the
evaluation, the export and the promotion decision, in one run."""

from __future__ import annotations

import dagster as dg

from assets.operations.sensors import current_corpus
from assets.partitions import consumed_shards
from resources import CorpusStorage, YunqueSettings
from stages.asset_names import EVAL_CONTAMINATION, HUMAN_PREFERENCES
from stages.store.keys import cache_key
from stages.training.retrain import unseen_shards

IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]

def valid_cron(text: str) -> bool:
    """Whether Dagster accepts `text` as a schedule's cron (a bad one in the home's
    settings would stop every process from loading the code location)."""
    from dagster._utils.schedules import is_valid_cron_string

    return is_valid_cron_string(text)


train_job = dg.define_asset_job(
    "train_and_promote", selection=dg.AssetSelection.assets(EVAL_CONTAMINATION, HUMAN_PREFERENCES).downstream(),
    description="Check that no evaluation set leaked into the training split, pretrain (continuing from the last "
                "base checkpoint when only the data changed), post-train, evaluate, export, and promote the export "
                "if it does not regress against the champion.",
)


def train_on_new_data(cron: str) -> dg.ScheduleDefinition:
    """The training schedule on `cron`. Dagster schedules are code: the cadence is the
    home's timing (stages.store.home.timing: YUNQUE_TRAINING_CRON, else `yunque ui
    --training-cron`, else hourly), which the code location reads when it loads."""

    @dg.schedule(name="train_on_new_data", job=train_job, cron_schedule=cron,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description="Off by default: turn it on to carry new data to a model. On each tick (cron "
                             f"{cron!r}: yunque ui --training-cron, hourly by default), if token shards exist that "
                             "the base model has not trained on, runs train_and_promote; otherwise skips and says "
                             "why. A failed attempt on the same data is not retried by the schedule: relaunch it "
                             "from the UI.")
    def _schedule(context: dg.ScheduleEvaluationContext, settings: YunqueSettings,
                  corpus: CorpusStorage) -> dg.RunRequest | dg.SkipReason:
        return training_tick(context, settings, corpus)

    return _schedule


def training_tick(context: dg.ScheduleEvaluationContext, settings: YunqueSettings,
                  corpus: CorpusStorage) -> dg.RunRequest | dg.SkipReason:
    busy = context.instance.get_runs(filters=dg.RunsFilter(job_name=train_job.name, statuses=IN_PROGRESS), limit=1)
    if busy:  # its base_model archives the previous run while it trains: nothing to compare with yet
        return dg.SkipReason(f"a {train_job.name} run is in progress ({busy[0].run_id})")
    # the corpus the home names now: this code server may have loaded an older one
    chosen = consumed_shards(context, settings, current_corpus(corpus), "token_shards")
    if chosen.pending:  # the data half is still at work: base_model would refuse
        return dg.SkipReason(f"waiting for token_shards of {sorted(chosen.pending)}")
    unseen = unseen_shards(settings.store(), chosen.ready)
    if not unseen.any:
        return dg.SkipReason(unseen.reason)
    # one request per set of data versions: the same data is not trained on twice
    return dg.RunRequest(run_key=cache_key(sorted(unseen.shards.items())),
                         tags={"yunque/new_shards": ",".join(sorted(unseen.shards))[:200]})
