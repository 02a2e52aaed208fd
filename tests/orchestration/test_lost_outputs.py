"""`yunque run`'s line about outputs Dagster records as materialized that the store no
longer holds (`orchestration.client.lost_outputs`)."""

from __future__ import annotations

import dagster as dg

from orchestration.client import lost_outputs
from stages.asset_names import HUMAN_PREFERENCES, RAW_DOCUMENTS
from stages.data import human_preferences
from stages.store.outputs import DataStore


def test_an_output_in_the_store_is_not_lost_whatever_file_marks_it(tmp_path):
    """human_preferences is not a cached stage: its summary, not a manifest, says it is
    there; a home that has it must not be told it is gone on every run."""
    store = DataStore(tmp_path)
    human_preferences.build(store)
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(dg.AssetMaterialization(HUMAN_PREFERENCES))
    instance.report_runless_asset_event(dg.AssetMaterialization(RAW_DOCUMENTS, partition="a"))
    instance.add_dynamic_partitions("shards", ["a"])
    assert lost_outputs(instance, store, ["a"]) == {RAW_DOCUMENTS: ["a"]}  # no raw_documents output
    (store.dir(HUMAN_PREFERENCES) / human_preferences.SUMMARY_FILE).unlink()
    assert lost_outputs(instance, store, ["a"]) == {RAW_DOCUMENTS: ["a"], HUMAN_PREFERENCES: ["*"]}
