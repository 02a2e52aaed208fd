"""A home on a real S3 protocol server (moto): versions committed by a manifest, a local
cache per machine, run directories mirrored without deleting what others wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from stages.store.outputs import DataStore, StageStats
from tests.stages.store.remote_homes import BUCKET, machine


def commit(store: DataStore, key: str, rows: list[str]) -> None:
    stats = StageStats(key=key, docs_in=len(rows), docs_out=len(rows))
    side = {store.rejected("s1", "filter"): pa.table({"doc_id": [f"r-{key}"], "reason": ["short"]})}
    store.commit("filtered_documents", "s1", stats, {"part-0.parquet": pa.table({"text": rows})}, side=side)


def test_commit_is_a_version_and_a_manifest_and_another_machine_reads_it(s3, tmp_path, monkeypatch):
    a = machine(monkeypatch, tmp_path, "a", "h1")
    commit(a, "k1", ["uno", "dos"])
    manifest = json.loads(s3.cat(f"{BUCKET}/h1/data/filtered_documents/s1/_manifest.json"))
    version = manifest["version"]
    assert version.startswith("v-k1-")
    assert sorted(Path(p).name for p in s3.find(f"{BUCKET}/h1/data/filtered_documents/s1/{version}")) == [
        "filter.parquet", "part-0.parquet"]
    assert manifest["side_files"] == ["rejected_documents/s1/filter.parquet"]  # relative: caches differ

    b = machine(monkeypatch, tmp_path, "b", "h1")
    hit = b.cached("filtered_documents", "s1", "k1")
    assert hit is not None and hit.docs_out == 2
    assert b.part("filtered_documents", "s1").is_relative_to(tmp_path / "b")
    assert pa.parquet.read_table(b.part("filtered_documents", "s1"))["text"].to_pylist() == ["uno", "dos"]
    assert pa.parquet.read_table(b.rejected("s1", "filter"))["doc_id"].to_pylist() == ["r-k1"]


def test_new_versions_keep_the_previous_one_for_readers_in_flight(s3, tmp_path, monkeypatch):
    a = machine(monkeypatch, tmp_path, "a", "h2")
    versions = []
    for k in ("k1", "k2", "k3"):
        commit(a, k, [k])
        versions.append(json.loads(s3.cat(f"{BUCKET}/h2/data/filtered_documents/s1/_manifest.json"))["version"])
    left = {Path(p).name for p in s3.ls(f"{BUCKET}/h2/data/filtered_documents/s1", refresh=True)}
    assert left == {"_manifest.json", versions[1], versions[2]}  # k1 is gone, k2 stays for old readers

    b = machine(monkeypatch, tmp_path, "b", "h2")
    assert b.manifest("filtered_documents", "s1")["key"] == "k3"


def test_a_local_output_the_store_lacks_is_not_an_output(s3, tmp_path, monkeypatch):
    local = DataStore(tmp_path / "a")  # the same cache directory, written as a local home
    commit(local, "k1", ["uno"])
    remote = machine(monkeypatch, tmp_path, "a", "h3")
    assert remote.cached("filtered_documents", "s1", "k1") is None
    assert not (tmp_path / "a" / "data" / "filtered_documents" / "s1").exists()


def test_run_directories_mirror_without_deleting_what_others_wrote(s3, tmp_path, monkeypatch):
    a = machine(monkeypatch, tmp_path, "a", "h4")
    root = a.dir("base_model")
    (root / "step-00000002").mkdir(parents=True)
    (root / "step-00000002" / "model.safetensors").write_bytes(b"w" * 100)
    (root / "step-00000002" / "checksums.json").write_text("{}")
    (root / "run.json").write_text('{"key": "r1"}')
    a.publish("base_model")
    # another node (rank 0 elsewhere) mirrored a checkpoint straight into the store
    s3.pipe(f"{BUCKET}/h4/data/base_model/step-00000004/model.safetensors", b"x" * 100)

    b = machine(monkeypatch, tmp_path, "b", "h4")
    broot = b.dir("base_model")
    assert (broot / "run.json").read_text() == '{"key": "r1"}'
    assert (broot / "step-00000004" / "model.safetensors").exists()
    # machine a archives its run (files move away) and publishes: they go from the store,
    # but the checkpoint it never had stays
    (root / "previous").mkdir()
    (root / "run.json").rename(root / "previous" / "run.json")
    a.publish("base_model")
    names = {p.split("/data/base_model/")[1] for p in s3.find(f"{BUCKET}/h4/data/base_model")}
    assert "run.json" not in names and "previous/run.json" in names
    assert "step-00000004/model.safetensors" in names
    # b pulls again: run.json goes (it had not changed it), a file b wrote meanwhile stays
    (broot / "notes.txt").write_text("mine")
    DataStore(f"s3://{BUCKET}/h4").dir("base_model")
    assert not (broot / "run.json").exists() and (broot / "previous" / "run.json").exists()
    assert (broot / "notes.txt").read_text() == "mine"


def test_home_url_never_becomes_a_local_folder(s3, tmp_path):
    """`yunque --home s3://...` used to create ./s3: in the working directory."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "YUNQUE_CACHE": str(tmp_path / "cache"),
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "YUNQUE_S3_ENDPOINT": s3.client_kwargs["endpoint_url"]}
    code = ("import sys; from yunque import env; from stages.store import home; h = env.use_home(sys.argv[1]); "
            "home.write(env.home_url(), home.HomeSettings(corpus='c')); print(h, env.home_url())")
    out = subprocess.run([sys.executable, "-c", code, f"s3://{BUCKET}/h5"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    local, url = out.stdout.split()
    assert local == str(tmp_path / "cache") and url == f"s3://{BUCKET}/h5"
    assert not (tmp_path / "s3:").exists()
    assert json.loads(s3.cat(f"{BUCKET}/h5/yunque.json"))["corpus"] == "c"


@pytest.mark.timeout(1200)
def test_whole_graph_on_an_s3_home_and_again_from_another_machine(s3, tmp_path, monkeypatch):
    """Every asset, `tiny` preset with the tests' small overrides, the home in the bucket:
    everything lands there, and a second machine (an empty cache, its own instance)
    recomputes nothing."""
    from orchestration.runner import run_graph
    from tests.support.factory import SMALL_RUN, write_two_shards
    from yunque import env

    write_two_shards(tmp_path / "corpus")
    home = f"s3://{BUCKET}/graph"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # shared by both machines

    def on(machine: str):
        monkeypatch.setenv("YUNQUE_CACHE", str(tmp_path / machine))
        monkeypatch.setenv("YUNQUE_HOME", home)
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / machine / "dagster"))  # restored afterwards
        env.use_home(home)
        return run_graph(str(tmp_path / "corpus"), overrides=SMALL_RUN)

    first = on("a")
    assert first.ok, [r.error for r in first.runs if not r.ok]
    listed = {p.split("/graph/", 1)[1] for p in s3.find(f"{BUCKET}/graph")}
    for path in ("data/eval_report/report.json", "data/promoted_model/champion.json",
                 "data/exported_model/yunque_export.json", "data/base_model/materialized.json",
                 "data/grpo_model/materialized.json"):
        assert path in listed, path
    assert any("/_side/rejected_documents/" in p for p in listed)  # the rejections, inside their versions

    second = on("b")
    assert second.ok, [r.error for r in second.runs if not r.ok]
    meta = {k: m for r in second.runs for k, m in r.assets.items()}
    assert meta["base_model"]["cached"] and meta["grpo_model"]["cached"]
    assert meta["exported_model"]["cached"] and meta["eval_report"]["cached"]
    per_shard = [m for r in second.runs for m in r.per_shard.values()]
    assert per_shard and all(m.get("cached") for m in per_shard)


def test_a_home_in_a_bucket_that_does_not_exist_is_named(s3, tmp_path, monkeypatch):
    """s3fs says only "The specified bucket does not exist": the error names the home."""
    from stages.store.remote import RemoteHome

    with pytest.raises(FileNotFoundError) as raised:
        RemoteHome("s3://no-such-bucket/home", tmp_path / "cache").write_text("yunque.json", "{}")
    assert raised.value.filename == "s3://no-such-bucket/home/yunque.json"
    assert "bucket does not exist" in str(raised.value)
