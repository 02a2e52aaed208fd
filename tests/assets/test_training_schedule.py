"""The training schedule's tick against a real instance: it never starts a second
training while one is queued or running (measured: the running one's base_model archives
the previous run, so a tick in between saw "no base model yet" and queued a duplicate)."""

from __future__ import annotations

import dagster as dg
from dagster._core.test_utils import create_run_for_test

from assets.operations.automation import train_on_new_data
from resources import CorpusStorage, YunqueSettings


def test_a_tick_skips_while_a_training_run_is_in_progress(tmp_path):
    (tmp_path / "corpus" / "uno").mkdir(parents=True)
    # the context is closed with the test: left open, it leaves the instance's storage set as
    # the current one, and a later test that loads definitions reads a deleted database
    with dg.instance_for_test() as instance, dg.build_schedule_context(instance=instance, resources={
            "settings": YunqueSettings(home=str(tmp_path / "home")),
            "corpus": CorpusStorage(uri=str(tmp_path / "corpus"))}) as ctx:
        run = create_run_for_test(instance, job_name="train_and_promote", status=dg.DagsterRunStatus.STARTED)
        schedule = train_on_new_data("0 * * * *")
        result = schedule(ctx)
        assert isinstance(result, dg.SkipReason) and run.run_id in result.skip_message
        instance.report_run_failed(run)
        after = schedule(ctx)  # nothing encoded in this home: skipped, and says why
        assert isinstance(after, dg.SkipReason) and "in progress" not in after.skip_message
