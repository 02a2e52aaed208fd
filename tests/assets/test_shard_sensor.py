"""The shard sensor against a real instance: what is already materialized is not requested
again, even with an empty cursor (the UI opened on a home that `yunque run` built)."""

from __future__ import annotations

import json
import shutil

import dagster as dg

from assets.definitions import ASSETS, build_resources
from assets.operations.sensors import shard_sensor
from resources import CorpusStorage
from tests.assets.sensor_ticks import requested_partitions
from tests.support.factory import add_shard


def _materialize_raw(instance: dg.DagsterInstance, home, root, shard: str) -> None:
    result = dg.materialize(ASSETS, selection=dg.AssetSelection.assets("raw_documents"), partition_key=shard,
                            instance=instance, resources=build_resources(home=str(home), corpus=str(root)))
    assert result.success


def _tick(instance: dg.DagsterInstance, root, cursor: str | None) -> dg.SensorResult:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"corpus": CorpusStorage(uri=str(root))})
    return shard_sensor(60)(ctx)


def test_sensor_skips_what_is_materialized_and_requests_what_is_new_or_changed(tmp_path):
    root, home = tmp_path / "corpus", tmp_path / "home"
    for i, name in enumerate(("uno", "dos", "tres")):
        add_shard(root, name, seed=i)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["uno", "dos", "tres"])
        for name in ("uno", "dos"):  # as `yunque run` leaves them
            _materialize_raw(instance, home, root, name)
        md = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("raw_documents"), asset_partitions=["uno"]), limit=1
        ).records[0].asset_materialization.metadata
        assert isinstance(md["fingerprint"], dg.TextMetadataValue) and md["fingerprint"].value

        # empty cursor: registered and read with today's files, so not requested; "tres"
        # is registered but was never read
        first = _tick(instance, root, None)
        assert requested_partitions(first) == ["tres"]
        assert not first.dynamic_partitions_requests
        assert json.loads(first.cursor).keys() == {"uno", "dos", "tres"}

        # nothing new since: skipped, and the instance is not the reason (the cursor is)
        _materialize_raw(instance, home, root, "tres")
        quiet = _tick(instance, root, first.cursor)
        assert not quiet.run_requests and quiet.skip_reason

        # a new shard, a changed one and a vanished one, seen by a sensor with an empty cursor
        add_shard(root, "cuatro", seed=9)
        (root / "dos" / "extra.txt").write_text("Otro documento más, con algunas palabras.", encoding="utf-8")
        shutil.rmtree(root / "tres")
        later = _tick(instance, root, None)
        assert requested_partitions(later) == ["cuatro", "dos"]
        requests = [(type(r).__name__, list(r.partition_keys)) for r in later.dynamic_partitions_requests]
        assert requests == [("AddDynamicPartitionsRequest", ["cuatro"]), ("DeleteDynamicPartitionsRequest", ["tres"])]


def test_a_materialization_without_fingerprint_is_requested_again(tmp_path):
    """Materializations from before raw_documents carried its fingerprint prove nothing."""
    root = tmp_path / "corpus"
    add_shard(root, "uno")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["uno"])
        instance.report_runless_asset_event(dg.AssetMaterialization("raw_documents", partition="uno"))
        assert requested_partitions(_tick(instance, root, None)) == ["uno"]


def test_sensor_says_what_it_does():
    sensor = shard_sensor(45)
    assert sensor.minimum_interval_seconds == 45 and "every 45 s" in sensor.description
    assert "fingerprint" in sensor.description and "raw_documents" in sensor.description


def test_a_shard_an_unfinished_backfill_will_read_is_left_to_it(tmp_path):
    """`yunque run` registers the shards, then submits its backfill: the sensor must not
    race it with runs of its own for the same partitions."""
    from dagster._core.execution.backfill import BulkActionStatus

    from assets.definitions import defs
    from orchestration import client

    root = tmp_path / "corpus"
    add_shard(root, "uno")
    add_shard(root, "dos", seed=2)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["uno", "dos"])
        chosen = client.targets(instance, defs(), [dg.AssetKey("raw_documents")], ["uno"])
        backfill = client.submit(instance, defs(), chosen, tags={}, run_config=None, title="test")
        first = _tick(instance, root, None)
        assert requested_partitions(first) == ["dos"]
        assert "uno" not in json.loads(first.cursor), "left out of the cursor: the next tick looks again"
        client.cancel(instance, backfill)  # CANCELING still counts; a finished one does not
        instance.update_backfill(instance.get_backfill(backfill).with_status(BulkActionStatus.CANCELED))
        assert requested_partitions(_tick(instance, root, first.cursor)) == ["uno"]


def test_a_gone_shard_a_backfill_targets_stays_registered_until_it_ends(tmp_path):
    """Deleting a partition that an unfinished backfill targets makes Dagster fail that
    backfill and cancel every run of it, the healthy shards' too. So a shard that left the
    corpus stays registered, for the sensor and for `yunque run`, until the backfill ends."""
    import shutil

    from dagster._core.execution.backfill import BulkActionStatus

    from assets.definitions import defs
    from orchestration import client

    root = tmp_path / "corpus"
    add_shard(root, "uno")
    add_shard(root, "dos", seed=2)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["uno", "dos"])
        chosen = client.targets(instance, defs(), [dg.AssetKey("token_shards")], ["uno", "dos"])
        backfill = client.submit(instance, defs(), chosen, tags={}, run_config=None, title="test")
        shutil.rmtree(root / "dos")
        tick = _tick(instance, root, None)
        assert not tick.dynamic_partitions_requests
        assert client.register_shards(instance, CorpusStorage(uri=str(root))) == (["uno"], [])
        assert set(instance.get_dynamic_partitions("shards")) == {"uno", "dos"}
        instance.update_backfill(instance.get_backfill(backfill).with_status(BulkActionStatus.COMPLETED_FAILED))
        deletes = _tick(instance, root, tick.cursor).dynamic_partitions_requests
        assert [(type(r).__name__, list(r.partition_keys)) for r in deletes] == [("DeleteDynamicPartitionsRequest",
                                                                                ["dos"])]
        assert client.register_shards(instance, CorpusStorage(uri=str(root))) == (["uno"], ["dos"])
        assert instance.get_dynamic_partitions("shards") == ["uno"]


def test_the_sensor_lists_the_corpus_the_home_names_now(tmp_path, monkeypatch):
    """A code server loaded with one corpus (a `yunque ui` opened earlier); then `yunque
    run` rewrote the home's settings with another. The next tick lists the new corpus:
    it registers its shards and never deregisters them for being absent from the old one."""
    from assets.operations import sensors
    from stages.store import home as home_settings

    old, new = tmp_path / "old", tmp_path / "new"
    add_shard(old, "viejo")
    add_shard(new, "nuevo", seed=2)
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    home_settings.write(tmp_path / "home", home_settings.HomeSettings(corpus=str(old)))
    monkeypatch.setattr(sensors, "LOADED", sensors._home_corpus())
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["viejo"])
        assert requested_partitions(_tick(instance, old, None)) == ["viejo"]  # unchanged settings: the corpus it loaded
        home_settings.write(tmp_path / "home", home_settings.HomeSettings(corpus=str(new)))
        tick = _tick(instance, old, None)
        adds = [list(r.partition_keys) for r in tick.dynamic_partitions_requests
                if type(r).__name__ == "AddDynamicPartitionsRequest"]
        assert adds == [["nuevo"]]
        assert requested_partitions(tick) == ["nuevo"]
