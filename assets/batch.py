"""Per-shard assets over a batch of shards in one run, the Dagster way.

A run costs process start-up and a code-location import, while one shard's stage work
can take less, so the per-shard assets carry `BackfillPolicy.multi_run(SHARDS_PER_RUN)`
and walk `context.partition_keys`. One bad shard must not cost its batch: each shard is
committed and reported by hand, with its own materialization and check events, as soon
as it is done; a shard that raises is skipped, and after the batch the step fails with one
line naming every failed shard, so a re-run recomputes only those.
docs/operations.md#batches-of-shards.
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import dagster as dg
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    NULL_EVENT_POINTER,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.events import DagsterEventType

# backfill_policy is a beta parameter of Dagster's; we rely on it knowingly
warnings.filterwarnings("ignore", category=dg.BetaWarning, message=".*backfill_policy.*")

# Shards per run of a per-shard asset, read when the code location loads (the daemon's and
# the UI's too). Unset, 32: at a second or two of start-up per run, about 30 runs per phase
# at 1,000 shards. `yunque run`, when it starts the daemon itself and the variable is unset,
# sets it for that daemon to one run per free run slot (`sized_to_slots`). 1 gives one run
# per shard (per-shard isolation and retries). docs/operations.md#batches-of-shards.
SHARDS_PER_RUN_VAR = "YUNQUE_SHARDS_PER_RUN"
LIGHT_SHARDS_PER_RUN_VAR = "YUNQUE_LIGHT_SHARDS_PER_RUN"
SHARDS_PER_RUN = max(1, int(os.environ.get(SHARDS_PER_RUN_VAR) or "32"))
POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN)
# deduped_documents: a tenth of a shard's chain in work (the shard's rows of the index
# applied to its documents), so batches four times larger; and a policy that differs from
# both its parent's and its child's, so that Dagster never puts it in one run with either:
# a batch step yields events, not outputs, and a child step in its parent's run would be
# skipped. (One run of every shard would leave one of the two run slots idle for minutes
# at 1,000 shards.)
LIGHT_SHARDS_PER_RUN = max(1, int(os.environ.get(LIGHT_SHARDS_PER_RUN_VAR) or 4 * SHARDS_PER_RUN))
if LIGHT_SHARDS_PER_RUN == SHARDS_PER_RUN:
    LIGHT_SHARDS_PER_RUN += 1
LIGHT_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=LIGHT_SHARDS_PER_RUN)


# The input a run must have before a second run slot pays for its start-up: about 8 s of
# a shard chain's work (1 MB of text is about a second of it), against 1.5-2 s to start a
# run, with two starting at once on two cores. 24 shards of a few KB: one run, 24.6 s
# against 20.8 s for two.
MIN_RUN_BYTES = 8 << 20


def sized_to_slots(shards: int, slots: int, input_bytes: int) -> dict[str, str]:
    """The batch settings for a daemon that serves one backfill of `shards` shards holding
    `input_bytes` with `slots` free run slots: one run per slot per phase (the launches,
    and the short last run of a phase beside a full one, were 80 idle slot-seconds at
    1,000 shards in runs of 32), fewer for a small input (MIN_RUN_BYTES).
    deduped_documents gets one more shard per run, a policy of its own (above)."""
    runs = max(1, min(slots, input_bytes // MIN_RUN_BYTES))
    per_run = max(1, -(-shards // runs))
    return {SHARDS_PER_RUN_VAR: str(per_run), LIGHT_SHARDS_PER_RUN_VAR: str(per_run + 1)}


Event = dg.AssetMaterialization | dg.AssetCheckEvaluation


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None) -> tuple[str, int | None]:
    """(data version, storage id) of the latest materialization of `key` (its `partition`).
    A shard's comes from the storage's tag and id indexes alone: fetching the record would
    deserialize its whole event (the filter report's metadata is tens of KB), 20 ms a
    shard and input, a twentieth of a shard's work."""
    if partition is None:
        found = instance.fetch_materializations(key, limit=1).records
        return ((found[0].event_log_entry.tags or {}).get(DATA_VERSION_TAG, ""), found[0].storage_id) if found \
            else ("", None)
    storage = instance.event_log_storage
    ids = storage.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION, {partition})
    if partition not in ids:
        return "", None
    tags = storage.get_latest_tags_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG],
                                                asset_partitions=[partition])
    return tags.get(partition, {}).get(DATA_VERSION_TAG, ""), ids[partition]


class ShardEvents:
    """The events of one batch step's shards, with their provenance as Dagster records it.
    Looked up once per step: a whole-corpus input (dedup_index, tokenizer), and a per-shard
    input materialized before the step, for all the step's shards at once (the list forms
    of the storage's partition queries). An input whose data version the step itself just
    reported is not read back, only its event's id: the lookups were a fifth of a deduped
    shard's step."""

    def __init__(self, context: dg.AssetExecutionContext):
        self.instance = context.instance
        self.run_id = context.run.run_id
        self.shards = set(context.partition_keys)  # asked once per shard and input: a set, not a list
        self._whole: dict[dg.AssetKey, tuple[str, int | None]] = {}
        self._before: dict[dg.AssetKey, dict[str, tuple[str, int]]] = {}

    def _before_step(self, key: dg.AssetKey) -> dict[str, tuple[str, int]]:
        """shard -> (data version, storage id) of the latest materialization of `key`, for
        every shard of the step, in two queries."""
        if key not in self._before:
            storage = self.instance.event_log_storage
            ids = storage.get_latest_storage_id_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION,
                                                             self.shards)
            tags = storage.get_latest_tags_by_partition(key, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG],
                                                        asset_partitions=list(ids)) if ids else {}
            self._before[key] = {p: (tags.get(p, {}).get(DATA_VERSION_TAG, ""), i) for p, i in ids.items()}
        return self._before[key]

    def _input(self, key: dg.AssetKey, partition: str | None, version: str | None) -> tuple[str, int | None]:
        if partition is None:
            if key not in self._whole:
                self._whole[key] = _latest(self.instance, key, None)
            return self._whole[key]
        if version is None:
            if partition in self.shards:
                return self._before_step(key).get(partition, ("", None))
            return _latest(self.instance, key, partition)
        ids = self.instance.event_log_storage.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, {partition})
        return version, ids.get(partition)

    def materialization(self, asset: str, shard: str, metadata: Mapping[str, Any], version: str,
                        code_version: str, inputs: Mapping[str, str | None] | None = None,
                        known: Mapping[str, str] | None = None) -> dg.AssetMaterialization:
        """One shard's materialization of `asset`, with the data version the stage's cache
        key gives (a cache hit reports the same version, so automation and the UI's
        staleness see no change) and its provenance: the latest materialization (data
        version and event) of each input, `inputs` mapping an upstream asset to its
        partition (None for a whole-corpus one), `known` giving the data versions this step
        reported for some of them. The UI calls the shard stale when an input moved on."""
        tags = {DATA_VERSION_TAG: version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true", CODE_VERSION_TAG: code_version}
        for upstream, partition in (inputs or {}).items():
            key = dg.AssetKey(upstream)
            data_version, storage_id = self._input(key, partition, (known or {}).get(upstream))
            tags[get_input_data_version_tag(key)] = data_version
            tags[get_input_event_pointer_tag(key)] = str(storage_id) if storage_id is not None else NULL_EVENT_POINTER
        return dg.AssetMaterialization(asset_key=asset, partition=shard, metadata=dict(metadata), tags=tags)

    def checks(self, asset: str, shard: str,
               results: Iterable[tuple[str, dg.AssetCheckResult, bool]]) -> list[dg.AssetCheckEvaluation]:
        """Check results (name, result, blocking) for one shard of a batch (a step over a
        range has no single partition for `AssetCheckResult` to take), tied to the shard's
        latest materialization as Dagster ties its own: automation's "blocking checks
        passed" and the UI read that link. The materialization is the one this run just
        reported, read by its id alone; its timestamp is taken as now (the same shard's
        processing, milliseconds before)."""
        from dagster._core.definitions.asset_checks.asset_check_evaluation import (
            AssetCheckEvaluationTargetMaterializationData,  # not exported; what a check step records
        )

        results = list(results)
        if not results:
            return []
        ids = self.instance.event_log_storage.get_latest_storage_id_by_partition(
            dg.AssetKey(asset), DagsterEventType.ASSET_MATERIALIZATION, {shard})
        target = (AssetCheckEvaluationTargetMaterializationData(run_id=self.run_id, storage_id=ids[shard],
                                                               timestamp=time.time()) if shard in ids else None)
        return [dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=check, passed=result.passed,
                                        metadata=dict(result.metadata or {}), severity=result.severity,
                                        description=result.description, blocking=blocking, partition=shard,
                                        target_materialization_data=target)
                for check, result, blocking in results]


def _reason(e: BaseException) -> str:
    text = (e.description if isinstance(e, dg.Failure) and e.description else str(e)) or type(e).__name__
    return " ".join(text.split())


def each_shard(context: dg.AssetExecutionContext, work: Callable[[str], Iterable[Event]]) -> Iterator[Any]:
    """Run `work(shard)` for every shard of the run, yielding its events as they come; a
    shard that raises is logged and left out. Then the outputs of the selected checks (the
    evaluations are already yielded per shard), and a `BatchFailure` naming the failed
    shards, if any."""
    failed: dict[str, str] = {}
    shards = list(context.partition_keys)
    for shard in shards:
        try:
            yield from work(shard)
        except Exception as e:  # noqa: BLE001 (any error in one shard's stages is that shard's alone)
            failed[shard] = _reason(e)
            context.log.error(f"shard {shard} failed: {failed[shard]}\n{traceback.format_exc()}")
    selected = context.selected_asset_check_keys
    for name, spec in context.assets_def.check_specs_by_output_name.items():
        if spec.key in selected:
            yield dg.Output(None, output_name=name)
    if failed:
        listed = "; ".join(f"{s}: {why}" for s, why in failed.items())
        done = len(shards) - len(failed)
        raise dg.Failure(
            description=f"{len(failed)} of {len(shards)} shards failed ({listed}). The other {done} are committed and "
                        "materialized; re-running the failed shards recomputes only them.",
            metadata={"failed_shards": dg.MetadataValue.json(failed)},
            allow_retries=False,  # a retry would redo the same failing input; the others are done
        )


def batches(order: list[str], wanted: Iterable[str], size: int = SHARDS_PER_RUN) -> list[list[str]]:
    """`wanted` shards cut into runs of at most `size`, each a contiguous range of the
    partitions' order (a ranged run covers every key between its first and its last)."""
    wanted = set(wanted)
    out: list[list[str]] = []
    run: list[str] = []
    for key in order:
        if key in wanted and len(run) < size:
            run.append(key)
            continue
        if run:
            out.append(run)
        run = [key] if key in wanted else []
    if run:
        out.append(run)
    return out
