"""Per-shard assets over a batch of shards in one run (`assets.batch`), in a real Dagster
instance: each shard gets its own materialization with its own data version and
provenance, a corrupt shard fails alone with its name in the error while the others are
committed and materialized, and a re-run of that shard alone succeeds once it is fixed."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.batch import (
    LIGHT_SHARDS_PER_RUN_VAR,
    MIN_RUN_BYTES,
    SHARDS_PER_RUN_VAR,
    batches,
    sized_to_slots,
)
from orchestration.client import RANGE_END_TAG, RANGE_START_TAG
from tests.support.factory import add_shard
from yunque import env

SHARDS = ["uno", "dos", "tres", "cuatro"]


def test_batches_are_contiguous_ranges_of_the_partition_order():
    order = ["a", "b", "c", "d", "e", "f", "g"]
    assert batches(order, order, 3) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    # a range covers every key between its ends: a gap in what is wanted ends the batch
    assert batches(order, ["a", "b", "d", "e", "f", "g"], 3) == [["a", "b"], ["d", "e", "f"], ["g"]]
    assert batches(order, ["g", "a"], 8) == [["a"], ["g"]]
    assert batches(order, [], 8) == []
    assert batches(order, order, 1) == [[k] for k in order]


def test_runs_are_sized_to_the_free_slots_unless_the_input_is_small():
    big = 1 << 30
    assert sized_to_slots(1000, 2, big) == {SHARDS_PER_RUN_VAR: "500", LIGHT_SHARDS_PER_RUN_VAR: "501"}
    assert sized_to_slots(1001, 2, big)[SHARDS_PER_RUN_VAR] == "501", "no third run for the odd shard"
    assert sized_to_slots(10, 4, big)[SHARDS_PER_RUN_VAR] == "3"
    assert sized_to_slots(3, 8, big)[SHARDS_PER_RUN_VAR] == "1", "never more runs than shards"
    # a small input: a second run's start-up costs more than the work it takes over
    assert sized_to_slots(24, 2, MIN_RUN_BYTES - 1)[SHARDS_PER_RUN_VAR] == "24"
    assert sized_to_slots(24, 2, 2 * MIN_RUN_BYTES)[SHARDS_PER_RUN_VAR] == "12"
    assert sized_to_slots(24, 0, big)[SHARDS_PER_RUN_VAR] == "24", "no free slot: one run, queued"


def test_an_explicit_batch_wins_over_the_slots(tmp_path, monkeypatch):
    from orchestration.client import instance as open_instance
    from pipelines.data.corpus import ShardInfo
    from yunque.cli.submit import batch_env

    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    env.use_home(tmp_path / "home")
    listed = [ShardInfo(key=f"s{i}", path=f"s{i}", files=[(f"s{i}/a.jsonl", 10 << 20, "v")]) for i in range(6)]
    instance = open_instance()
    # 4 shards of 10 MB targeted (2 others up to date), the laptop's 2 slots: two runs of 2
    assert batch_env(instance, listed[:4]) == {SHARDS_PER_RUN_VAR: "2", LIGHT_SHARDS_PER_RUN_VAR: "3"}
    assert batch_env(instance, []) == {}, "no shard targeted: the daemon's own setting"
    monkeypatch.setenv(SHARDS_PER_RUN_VAR, "1")
    assert batch_env(instance, listed[:4]) == {}, "the daemon inherits the user's setting"


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    return env.use_home(tmp_path / "home")


def _run(instance, resources, keys: list[str], shards: list[str]) -> dg.ExecuteInProcessResult:
    from assets.definitions import ASSETS, CHECKS

    tags = {RANGE_START_TAG: shards[0], RANGE_END_TAG: shards[-1]} if len(shards) > 1 else {}
    return dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*keys), instance=instance,
                          resources=resources, partition_key=shards[0] if len(shards) == 1 else None, tags=tags,
                          raise_on_error=False)


def test_a_corrupt_shard_fails_alone_in_its_batch(home, tmp_path):
    from assets.definitions import build_resources
    from tests.support.factory import SMALL_RUN

    root = tmp_path / "corpus"
    for i, name in enumerate(SHARDS):
        add_shard(root, name, seed=i)
    resources = build_resources(home=str(home), corpus=str(root), overrides=SMALL_RUN)
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("shards", SHARDS)

    read = _run(instance, resources, ["raw_documents"], SHARDS)
    assert read.success
    raw = {e.partition: e.step_materialization_data.materialization for e in read.get_asset_materialization_events()}
    assert sorted(raw) == sorted(SHARDS)
    # each shard's own metadata and data version (the stage's cache key), not the batch's
    fingerprints = {k: m.metadata["fingerprint"].value for k, m in raw.items()}
    assert len(set(fingerprints.values())) == len(SHARDS)
    versions = {k: m.tags["dagster/data_version"] for k, m in raw.items()}
    assert len(set(versions.values())) == len(SHARDS)

    # the input of "tres"'s next stage is damaged on disk (its cache key still matches)
    part = home / "data" / "raw_documents" / "tres" / "part-0.parquet"
    good = part.read_bytes()
    part.write_bytes(b"not a parquet file")
    result = _run(instance, resources, ["clean_documents", "filtered_documents", "minhash_signatures"], SHARDS)
    assert not result.success
    done = {(e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()}
    assert done == {(a, s) for a in ("clean_documents", "filtered_documents", "minhash_signatures")
                    for s in SHARDS if s != "tres"}
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data
    assert "1 of 4 shards failed (tres:" in failure.error.message
    assert "tres" in failure.user_failure_data.metadata["failed_shards"].value
    # the provenance of each shard points at its own input
    clean = instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("clean_documents"), asset_partitions=["dos"]), limit=1).records[0]
    assert clean.event_log_entry.tags["dagster/input_data_version/raw_documents"] == versions["dos"]

    # fixed, then re-run alone: only that shard is computed, the others were committed
    part.write_bytes(good)
    again = _run(instance, resources, ["clean_documents", "filtered_documents", "minhash_signatures"], ["tres"])
    assert again.success
    mats = again.get_asset_materialization_events()
    assert {e.partition for e in mats} == {"tres"}
    assert all(e.step_materialization_data.materialization.metadata["cached"].value is False for e in mats)


def test_deduped_documents_reports_its_checks_per_shard(home, tmp_path):
    from assets.definitions import build_resources
    from tests.support.factory import SMALL_RUN

    root = tmp_path / "corpus"
    for i, name in enumerate(SHARDS[:3]):
        add_shard(root, name, seed=i)
    resources = build_resources(home=str(home), corpus=str(root), overrides=SMALL_RUN)
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("shards", SHARDS[:3])
    assert _run(instance, resources, ["raw_documents", "clean_documents", "filtered_documents",
                                      "minhash_signatures"], SHARDS[:3]).success
    assert _run(instance, resources, ["dedup_index"], [None]).success
    assert _run(instance, resources, ["quality_model"], [None]).success
    result = _run(instance, resources, ["deduped_documents"], SHARDS[:3])
    assert result.success
    checks = {(c.check_name, c.partition): c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {(n, s) for n in ("every_document_once", "language_is_pure") for s in SHARDS[:3]}
    assert all(c.passed for c in checks.values())
    # tied to the shard's own materialization, as Dagster ties a check step's result
    for (_, shard), c in checks.items():
        latest = instance.fetch_materializations(dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("deduped_documents"), asset_partitions=[shard]), limit=1).records[0]
        assert c.target_materialization_data.storage_id == latest.storage_id

    # what those four runs cost beyond their steps, from their own events
    from orchestration.costs import run_costs

    costs = run_costs(instance)
    assert costs["runs"] == 4
    assert 0 <= costs["run_start_to_first_step_s"] < 60 and 0 <= costs["last_step_to_run_end_s"] < 60
