"""The automation conditions of the token half, evaluated against a real instance: token
shards follow a new tokenizer, but not one whose blocking round-trip check failed."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,  # not exported; what a real check run records
)

from assets.definitions import defs


def _token_shard_requests(instance, cursor):
    result = dg.evaluate_automation_conditions(
        defs=defs, instance=instance, asset_selection=dg.AssetSelection.assets("token_shards"), cursor=cursor)
    keys: set[str] = set()
    for r in result.results:
        if r.key == dg.AssetKey("token_shards"):
            keys |= set(r.true_subset.expensively_compute_partition_keys())
    return result.cursor, keys


def _materialize(instance, asset: str, check: str, passed: bool, partition: str | None = None) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, partition=partition))
    _check(instance, asset, check, passed, partition)


def _check(instance, asset: str, check: str, passed: bool, partition: str | None = None) -> None:
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None),
        limit=1).records[0]
    target = AssetCheckEvaluationTargetMaterializationData(
        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp)
    instance.report_runless_asset_event(dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(asset), check_name=check, passed=passed, partition=partition,
        target_materialization_data=target, blocking=True))


def test_token_shards_wait_for_a_tokenizer_that_passed_its_blocking_check():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["a", "b"])
        cursor, _ = _token_shard_requests(instance, None)
        for shard in ("a", "b"):
            _materialize(instance, "deduped_documents", "every_document_once", True, shard)
        _materialize(instance, "tokenizer", "tokenizer_round_trip", passed=False)
        cursor, blocked = _token_shard_requests(instance, cursor)
        assert blocked == set()
        _check(instance, "tokenizer", "tokenizer_round_trip", passed=True)  # e.g. re-run after a fix
        cursor, requested = _token_shard_requests(instance, cursor)
        assert requested == {"a", "b"}
