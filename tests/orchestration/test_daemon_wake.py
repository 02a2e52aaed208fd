"""Our daemon's loops wait out their interval unless there is news (`orchestration.wakeups`),
against a real instance: for the backfill loop a run that starts is none, a run that ends
is, and so is Ctrl-C (the shutdown event); for the queue, a run queued."""

from __future__ import annotations

import threading
import time
import uuid

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType

from orchestration.wakeups import WakingEvent, backfill_news, queue_news
from yunque import env


@pytest.fixture()
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    env.use_home(tmp_path / "home")
    with dg.DagsterInstance.get() as inst:
        yield inst


def _waited(event: WakingEvent, timeout: float, then) -> tuple[float, bool]:
    """Seconds `event.wait(timeout)` took while `then()` ran 0.5 s into it, and what it returned."""
    out: list = []

    def wait() -> None:
        t0 = time.monotonic()
        got = event.wait(timeout)
        out.extend([time.monotonic() - t0, got])

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    then()
    waiter.join(timeout + 10)
    return out[0], out[1]


def test_a_run_that_ends_wakes_the_loop_and_one_that_starts_does_not(instance):
    job = dg.GraphDefinition(name="g").to_job()
    shutdown = threading.Event()
    event = WakingEvent(shutdown, instance, backfill_news)
    started = instance.create_run_for_job(job)
    start = DagsterEvent(DagsterEventType.RUN_START.value, job_name="g")
    took, stopped = _waited(event, 3.0, lambda: instance.run_storage.handle_run_event(started.run_id, start))
    assert instance.get_run_by_id(started.run_id).status == dg.DagsterRunStatus.STARTED
    assert took >= 2.9 and not stopped, "a start is no news for the backfill loop"
    took, stopped = _waited(event, 10.0, lambda: instance.report_run_failed(started, message="done"))
    assert took < 2.0 and not stopped, f"the loop slept {took:.1f} s past a run's end"
    took, stopped = _waited(event, 10.0, shutdown.set)
    assert took < 2.0 and stopped


def test_a_queued_run_wakes_the_queue(instance):
    job = dg.GraphDefinition(name="g").to_job()
    event = WakingEvent(threading.Event(), instance, queue_news)
    took, _ = _waited(event, 3.0, lambda: instance.create_run_for_job(job))  # NOT_STARTED: not the queue's
    assert took >= 2.9
    from dagster._core.remote_origin import (
        InProcessCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    where = RemoteRepositoryOrigin(InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__)), "repo")
    queued = dg.DagsterRun(job_name="g", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.QUEUED,
                           remote_job_origin=RemoteJobOrigin(where, "g"))
    took, stopped = _waited(event, 10.0, lambda: instance.run_storage.add_run(queued))
    assert took < 2.0 and not stopped
