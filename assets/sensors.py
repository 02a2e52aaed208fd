"""The shard sensor: new shards at the corpus location become partitions and runs."""

import json
import os

import dagster as dg

from assets.jobs import shard_job
from assets.partitions import shards
from resources import CorpusStorage

# How often the corpus is listed; the tests shorten it.
INTERVAL = int(os.environ.get("YUNQUE_SENSOR_INTERVAL", "60"))


@dg.sensor(job=shard_job, minimum_interval_seconds=INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def shard_sensor(context: dg.SensorEvaluationContext, corpus: CorpusStorage) -> dg.SensorResult:
    """Registers every new shard as a dynamic partition and requests a run for it; a
    shard whose files changed (new fingerprint) is requested again; a shard that is gone
    from the corpus is deregistered (its outputs stay on disk, dedup_index ignores it)."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    found = {s.key: s.fingerprint for s in corpus.shards()}
    registered = set(context.instance.get_dynamic_partitions(shards.name))
    new_keys = sorted(k for k in found if k not in registered)
    changed = sorted(k for k, fp in found.items() if seen.get(k) != fp)
    gone = sorted(registered - found.keys())
    if not changed and not new_keys and not gone:
        return dg.SensorResult(skip_reason=f"no new or changed shards under {corpus.uri}", cursor=context.cursor)
    requests = [dg.RunRequest(run_key=f"{k}:{found[k]}", partition_key=k) for k in changed]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[
            *([shards.build_add_request(new_keys)] if new_keys else []),
            *([shards.build_delete_request(gone)] if gone else []),
        ],
        cursor=json.dumps(found, sort_keys=True),
    )
