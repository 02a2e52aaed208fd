"""The shard sensor: new shards at the corpus location become partitions and runs."""

import json

import dagster as dg

from assets.operations.jobs import SHARD_JOB_ASSETS
from assets.partitions import in_unfinished_backfills, shards
from resources import CorpusStorage
from stages.asset_names import RAW_DOCUMENTS
from stages.store import home as home_settings
from stages.store.location import home_url

RAW = dg.AssetKey(RAW_DOCUMENTS)


def in_backfills(instance: dg.DagsterInstance) -> set[str]:
    """Shards whose raw_documents an unfinished backfill (`yunque run`, the UI) will read:
    requesting them too would only race it."""
    return in_unfinished_backfills(instance, RAW)


def materialized_fingerprint(instance: dg.DagsterInstance, shard: str) -> str | None:
    """The shard fingerprint that its latest raw_documents materialization read (None if
    it has none, or only one from before materializations carried it)."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=RAW, asset_partitions=[shard]),
                                              limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    value = records[0].asset_materialization.metadata.get("fingerprint")
    return value.value if isinstance(value, dg.TextMetadataValue) else None


def _home_corpus() -> tuple[str, str, str] | None:
    """(home, corpus, S3 endpoint) as the home's settings give them now."""
    try:
        saved = home_settings.read(home_url())
    except ValueError:  # a broken yunque.json: the code location said so at load
        return None
    return home_url(), saved.corpus, saved.s3_endpoint


# What the home's settings said when this code location loaded (its resources come from them)
LOADED = _home_corpus()


def current_corpus(loaded: CorpusStorage) -> CorpusStorage:
    """The corpus the home's settings name now. This sensor runs in a code server that read
    them once, when it loaded (a `yunque ui` opened yesterday); a `yunque run` with another
    corpus has rewritten them since, and listing the old corpus would deregister the new
    one's shards. Only a change of the settings since the load counts: YUNQUE_CORPUS, or a
    corpus given to `build_resources`, still wins as long as the settings stay as they were."""
    now = _home_corpus()
    if now is None or LOADED is None or now == LOADED or now[0] != LOADED[0] or not now[1]:
        return loaded
    return CorpusStorage(uri=now[1], endpoint_url=now[2] or loaded.endpoint_url, anon=loaded.anon)


def shards_backfill(keys: list[str]) -> dg.RunRequest:
    """One backfill of shard_job's assets over `keys` (a request the sensor daemon turns
    into a backfill, so that the assets' backfill policy applies)."""
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset

    subset = shards.empty_subset().with_partition_keys(keys)
    return dg.RunRequest.for_asset_graph_subset(
        AssetGraphSubset(partitions_subsets_by_asset_key={dg.AssetKey(a): subset for a in SHARD_JOB_ASSETS}),
        tags={"yunque/sensor": "shard_sensor"})


def shard_sensor(interval_s: int) -> dg.SensorDefinition:
    """The shard sensor, listing the corpus every `interval_s` seconds: the home's timing
    (stages.store.home.timing: YUNQUE_SENSOR_INTERVAL, else `yunque ui --sensor-interval`,
    else 60 s), which the code location reads when it loads."""

    @dg.sensor(
        name="shard_sensor", asset_selection=dg.AssetSelection.assets(*SHARD_JOB_ASSETS), minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Lists the corpus every {interval_s} s (yunque ui --sensor-interval): registers each new shard "
                    "as a partition of `shards` and requests shard_job's assets for it, again for a shard whose files changed "
                    "(new fingerprint), in one backfill per tick (batched into runs of YUNQUE_SHARDS_PER_RUN shards), "
                    "and deregisters a shard that is gone. A shard whose latest raw_documents "
                    "materialization already read its current files (by `yunque run`, a backfill or an earlier "
                    "tick), or that an unfinished backfill is about to read, is not requested.",
    )
    def _sensor(context: dg.SensorEvaluationContext, corpus: CorpusStorage) -> dg.SensorResult:
        return shard_tick(context, corpus)

    return _sensor


def shard_tick(context: dg.SensorEvaluationContext, corpus: CorpusStorage) -> dg.SensorResult:
    """Registers every new shard as a dynamic partition and requests its per-shard assets;
    a shard whose files changed (new fingerprint) is requested again; a shard that is gone
    from the corpus is deregistered (its outputs stay on disk, dedup_index ignores it).
    The shards of one tick go in one backfill, which the per-shard assets' backfill policy
    batches: 500 shards landing at once make a few runs, not 500."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    corpus = current_corpus(corpus)
    found = {s.key: s.fingerprint for s in corpus.shards()}
    registered = set(context.instance.get_dynamic_partitions(shards.name))
    new_keys = sorted(k for k in found if k not in registered)
    # The cursor only knows what this sensor requested: on a home built by `yunque run`
    # (or after a cursor reset) it starts empty, so the instance is asked what was read
    # already; only for shards the cursor does not vouch for, none on a quiet tick.
    unsure = sorted(k for k, fp in found.items() if seen.get(k) != fp)
    busy = in_backfills(context.instance) if unsure else set()
    changed = [k for k in unsure if k not in busy and materialized_fingerprint(context.instance, k) != found[k]]
    gone = sorted(registered - found.keys())
    if gone:  # one that a backfill still targets is deregistered once that backfill has ended
        gone = sorted(set(gone) - in_unfinished_backfills(context.instance))
    # a shard left to a backfill stays out of the cursor: the next tick looks again
    cursor = json.dumps({k: fp for k, fp in found.items() if k not in busy}, sort_keys=True)
    if not changed and not new_keys and not gone:
        return dg.SensorResult(skip_reason=f"no new or changed shards under {corpus.uri}", cursor=cursor)
    requests = [shards_backfill(changed)] if changed else []
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[
            *([shards.build_add_request(new_keys)] if new_keys else []),
            *([shards.build_delete_request(gone)] if gone else []),
        ],
        cursor=cursor,
    )
