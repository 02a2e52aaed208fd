"""What the runs of an instance cost, from their own events: how many there are, and the
median seconds from enqueued to launched (the queue), from launched to the run worker's
start (a process start and a code-location import), from run start to first step, and
from the last step's end to the run's end: what a run costs beyond its steps."""

from __future__ import annotations

import statistics

import dagster as dg
from dagster._core.events import DagsterEventType

KINDS = {DagsterEventType.RUN_ENQUEUED, DagsterEventType.RUN_STARTING, DagsterEventType.RUN_START, DagsterEventType.RUN_SUCCESS,
         DagsterEventType.RUN_FAILURE, DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS,
         DagsterEventType.STEP_FAILURE}


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def run_costs(instance: dg.DagsterInstance) -> dict[str, float | int | None]:
    to_first, after_last, queued, launch = [], [], [], []
    runs = instance.get_runs()
    for run in runs:
        at: dict[DagsterEventType, list[float]] = {}
        for r in instance.get_records_for_run(run.run_id, of_type=KINDS).records:
            at.setdefault(r.event_log_entry.dagster_event.event_type, []).append(r.event_log_entry.timestamp)
        start = at.get(DagsterEventType.RUN_START, [None])[0]
        end = (at.get(DagsterEventType.RUN_SUCCESS) or at.get(DagsterEventType.RUN_FAILURE) or [None])[0]
        steps = at.get(DagsterEventType.STEP_START, [])
        ends = at.get(DagsterEventType.STEP_SUCCESS, []) + at.get(DagsterEventType.STEP_FAILURE, [])
        if start is not None and steps:
            to_first.append(min(steps) - start)
        if end is not None and ends:
            after_last.append(end - max(ends))
        starting = at.get(DagsterEventType.RUN_STARTING, [None])[0]
        if starting is not None and DagsterEventType.RUN_ENQUEUED in at:
            queued.append(starting - at[DagsterEventType.RUN_ENQUEUED][0])
        if start is not None and starting is not None:
            launch.append(start - starting)
    return {"runs": len(runs), "enqueued_to_launched_s": _median(queued), "launched_to_run_start_s": _median(launch),
            "run_start_to_first_step_s": _median(to_first), "last_step_to_run_end_s": _median(after_last)}


def home_instance(dagster_home: str) -> dg.DagsterInstance:
    """The instance under `dagster_home`, opened from outside the home's own processes."""
    import os

    from dagster._core.instance.ref import InstanceRef

    os.environ["DAGSTER_HOME"] = dagster_home  # its dagster.yaml reads it at load
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(dagster_home))
