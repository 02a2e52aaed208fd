"""The automation conditions of the token half, evaluated against a real instance: token
shards follow a new tokenizer, but not one whose blocking round-trip check failed."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,  # not exported; what a real check run records
)
from dagster._core.definitions.data_version import (
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
)

from assets.definitions import defs


def _token_shard_requests(instance, cursor):
    result = dg.evaluate_automation_conditions(
        defs=defs(), instance=instance, asset_selection=dg.AssetSelection.assets("token_shards"), cursor=cursor)
    keys: set[str] = set()
    for r in result.results:
        if r.key == dg.AssetKey("token_shards"):
            keys |= set(r.true_subset.expensively_compute_partition_keys())
    return result.cursor, keys


def _materialize(instance, asset: str, check: str, passed: bool, partition: str | None = None,
                 version: str = "1") -> None:
    # with a data version, as our assets report them: the conditions react to changed versions
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset, partition=partition, tags={DATA_VERSION_TAG: version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"}))
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




def test_a_cache_hit_is_not_news_but_a_changed_shard_is():
    """`changed_deps()` (what dedup_index, deduped_documents, the tokenizer and token_shards
    react to): a re-run that found its output in the stage cache records a materialization
    with the same data version, which must not request the downstream partition again
    (Dagster's `any_deps_updated()` does: the comparison below)."""
    from dagster._core.definitions.partitions.context import partition_loading_context

    from assets.conditions import changed_deps

    parts = dg.DynamicPartitionsDefinition(name="shards")
    versions: dict[str, str] = {}

    @dg.asset(partitions_def=parts)
    def up(context):
        return dg.MaterializeResult(data_version=dg.DataVersion(versions[context.partition_key]))

    def requests(condition: dg.AutomationCondition) -> list[set[str]]:
        down = dg.AssetSpec("down", deps=["up"], partitions_def=parts, automation_condition=condition)
        graph = dg.Definitions(assets=[up, down])
        seen, cursor = [], None
        with dg.instance_for_test() as instance:
            def tick() -> None:
                nonlocal cursor
                result = dg.evaluate_automation_conditions(defs=graph, instance=instance, cursor=cursor)
                cursor = result.cursor
                with partition_loading_context(dynamic_partitions_store=instance):
                    seen.append({p for r in result.results if r.key == dg.AssetKey("down")
                                 for p in r.true_subset.expensively_compute_partition_keys()})

            def run_up(shard: str, version: str) -> None:
                versions[shard] = version
                assert dg.materialize([up], instance=instance, partition_key=shard).success

            instance.add_dynamic_partitions("shards", ["a", "b"])
            tick()
            run_up("a", "1"), run_up("b", "1")
            tick()  # both new
            for shard in ("a", "b"):  # the downstream runs
                instance.report_runless_asset_event(dg.AssetMaterialization("down", partition=shard))
            tick()
            run_up("a", "1"), run_up("b", "1")  # a backfill over unchanged shards: all cache hits
            tick()
            run_up("b", "2")  # one shard's files changed
            tick()
        return seen[1:]

    assert requests(changed_deps().since_last_handled()) == [{"a", "b"}, set(), set(), {"b"}]
    assert requests(dg.AutomationCondition.any_deps_updated().since_last_handled())[:3] == [
        {"a", "b"}, set(), {"a", "b"}]
