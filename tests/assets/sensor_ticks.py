"""What a tick of the shard sensor asked for, read back from its SensorResult."""

from __future__ import annotations

import dagster as dg

from assets.operations.jobs import SHARD_JOB_ASSETS


def requested_partitions(result: dg.SensorResult) -> list[str]:
    """The shards a tick requests: one backfill of shard_job's four assets over all of them."""
    if not result.run_requests:
        return []
    assert len(result.run_requests) == 1, "one backfill per tick, however many shards"
    subset = result.run_requests[0].asset_graph_subset
    keys = {a: sorted(subset.get_partitions_subset(dg.AssetKey(a)).get_partition_keys()) for a in SHARD_JOB_ASSETS}
    assert len({tuple(v) for v in keys.values()}) == 1, keys
    return keys["raw_documents"]
