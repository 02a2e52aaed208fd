"""Outputs checked before they are trusted (`stages.store.integrity`): the manifest's
checksums, the cheap check a cache lookup makes, the full one a reader makes, and the
same in a home on an object store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.store import integrity
from stages.store.outputs import MANIFEST, DataStore, StageStats
from stages.store.verify import quarantine, verify_home
from tests.stages.store.remote_homes import BUCKET, machine


def commit(store: DataStore, key: str = "k1", rows: tuple[str, ...] = ("uno", "dos", "tres")) -> None:
    stats = StageStats(key=key, docs_in=len(rows), docs_out=len(rows))
    side = {store.rejected("s1", "filter"): pa.table({"doc_id": ["r1"], "reason": ["short"]})}
    store.commit("filtered_documents", "s1", stats, {"part-0.parquet": pa.table({"text": list(rows)})}, side=side)


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_a_byte(path: Path) -> None:
    """Same size, same mtime: only the checksum can tell."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_commit_records_a_checksum_per_file_side_files_included(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    m = store.manifest("filtered_documents", "s1")
    checks = m[integrity.CHECKSUMS]
    assert set(checks) == {"part-0.parquet", "rejected_documents/s1/filter.parquet"}
    part = store.dir("filtered_documents", "s1") / "part-0.parquet"
    assert checks["part-0.parquet"] == {"size": part.stat().st_size, "mtime_ns": part.stat().st_mtime_ns,
                                        "xxh3_128": integrity.checksum(part)}
    assert store.cached("filtered_documents", "s1", "k1") is not None


def test_a_cut_file_is_a_miss_and_a_reader_refuses_it_in_one_line(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    cut_in_half(store.dir("filtered_documents", "s1") / "part-0.parquet")
    assert store.cached("filtered_documents", "s1", "k1") is None
    assert store.damage("filtered_documents", "s1").startswith("part-0.parquet: size ")
    with pytest.raises(integrity.DamagedOutput) as e:
        store.part("filtered_documents", "s1")
    line = str(e.value)
    assert "\n" not in line
    part = store.dir("filtered_documents", "s1") / "part-0.parquet"
    assert line.startswith(f"filtered_documents/s1 is damaged: {part} (size ")
    assert (e.value.file, e.value.why.split(" ")[0]) == ("part-0.parquet", "size")
    assert "yunque verify --repair" in line and "Materialize filtered_documents for partition s1" in line
    commit(store)  # the stage builds it again: the same key, whole again
    assert store.cached("filtered_documents", "s1", "k1") is not None
    assert pq.read_table(store.part("filtered_documents", "s1"))["text"].to_pylist() == ["uno", "dos", "tres"]


def test_bytes_changed_under_the_same_size_and_mtime_are_caught_by_a_reader(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    flip_a_byte(store.dir("filtered_documents", "s1") / "part-0.parquet")
    assert store.damage("filtered_documents", "s1") is None  # the cheap check cannot see it
    assert store.damage("filtered_documents", "s1", full=True) == "part-0.parquet: checksum"
    with pytest.raises(integrity.DamagedOutput, match=r"part-0.parquet \(checksum\); it is not read"):
        store.part("filtered_documents", "s1")


def test_a_moved_mtime_is_hashed_and_unchanged_bytes_are_not_damage(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    part = store.dir("filtered_documents", "s1") / "part-0.parquet"
    os.utime(part, ns=(part.stat().st_atime_ns, part.stat().st_mtime_ns + 10**9))
    assert store.cached("filtered_documents", "s1", "k1") is not None
    side = store.rejected("s1", "filter")
    side.write_bytes(side.read_bytes()[:-1] + b"\0")  # a side file rewritten: same size, other bytes
    assert store.damage("filtered_documents", "s1") == "rejected_documents/s1/filter.parquet: checksum"
    assert store.cached("filtered_documents", "s1", "k1") is None


def test_a_missing_file_and_a_manifest_without_checksums_are_damage(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    store.rejected("s1", "filter").unlink()
    assert store.damage("filtered_documents", "s1") == "rejected_documents/s1/filter.parquet: missing"
    commit(store, key="k2")
    path = store.dir("filtered_documents", "s1") / MANIFEST
    old = json.loads(path.read_text())
    old.pop(integrity.CHECKSUMS)  # as written before checksums were recorded
    path.write_text(json.dumps(old))
    assert store.cached("filtered_documents", "s1", "k2") is None
    assert "no checksums" in store.damage("filtered_documents", "s1")


def test_verify_home_reads_every_byte_of_every_output(tmp_path):
    store = DataStore(tmp_path)
    commit(store)
    store.commit("dedup_index", None, StageStats(key="i"), {"near_duplicates.parquet": pa.table({"doc_id": ["a"]})})
    checked, damaged = verify_home(store)
    assert (checked, damaged) == (2, [])
    flip_a_byte(store.dir("dedup_index") / "near_duplicates.parquet")
    checked, damaged = verify_home(store)
    assert checked == 2 and [d.line() for d in damaged] == [
        "damaged: dedup_index (near_duplicates.parquet: checksum; here)"]


def test_quarantine_takes_a_damaged_output_out_of_the_committed_set(tmp_path):
    """Damage only a full read sees passes the cheap check; quarantined, the output is not
    committed any more, so the next run of its stage builds it, and the file stays to look at."""
    store = DataStore(tmp_path)
    commit(store)
    flip_a_byte(store.dir("filtered_documents", "s1") / "part-0.parquet")
    assert store.cached("filtered_documents", "s1", "k1") is not None
    _, damaged = verify_home(store)
    quarantine(store, damaged[0])
    assert store.manifest("filtered_documents", "s1") is None
    assert store.cached("filtered_documents", "s1", "k1") is None
    assert not store.dir("filtered_documents", "s1").exists()  # no reader finds its files where outputs live
    kept = list((store.data / "_damaged" / "filtered_documents" / "s1").glob("*/part-0.parquet"))
    assert len(kept) == 1  # set aside for a look
    with pytest.raises(FileNotFoundError, match="filtered_documents/s1 has no committed output"):
        store.part("filtered_documents", "s1")
    assert verify_home(store) == (0, [])
    commit(store)
    assert verify_home(store) == (1, [])


def test_an_object_damaged_in_the_store_is_never_pulled_and_is_rebuilt(s3, tmp_path, monkeypatch):
    a = machine(monkeypatch, tmp_path, "a", "integrity-1")
    commit(a)
    version = json.loads(s3.cat(f"{BUCKET}/integrity-1/data/filtered_documents/s1/{MANIFEST}"))["version"]
    obj = f"{BUCKET}/integrity-1/data/filtered_documents/s1/{version}/part-0.parquet"
    data = s3.cat(obj)
    s3.pipe(obj, data[: len(data) // 2])

    b = machine(monkeypatch, tmp_path, "b", "integrity-1")  # a machine that has no copy yet
    assert b.cached("filtered_documents", "s1", "k1") is None  # a miss: its stage builds it again
    with pytest.raises(integrity.DamagedOutput) as e:
        b.part("filtered_documents", "s1")
    assert f"s3://{BUCKET}/integrity-1/data/filtered_documents/s1/{version}: part-0.parquet is damaged in the store" in str(e.value)

    checked, damaged = verify_home(b)
    want = (f"damaged: filtered_documents/s1 (part-0.parquet: size {len(data) // 2:,} bytes, "
            f"committed {len(data):,}; in the store)")
    assert checked == 1 and [d.line() for d in damaged] == [want]
    # machine a still holds a good copy of that version; quarantine makes every cache drop it
    quarantine(b, damaged[0])
    a2 = machine(monkeypatch, tmp_path, "a", "integrity-1")
    assert a2.cached("filtered_documents", "s1", "k1") is None
    commit(a2)
    c = machine(monkeypatch, tmp_path, "c", "integrity-1")
    assert pq.read_table(c.part("filtered_documents", "s1"))["text"].to_pylist() == ["uno", "dos", "tres"]
    assert verify_home(c) == (1, [])


def test_a_pulled_copy_is_stamped_with_its_local_mtimes(s3, tmp_path, monkeypatch):
    a = machine(monkeypatch, tmp_path, "a", "integrity-2")
    commit(a)
    b = machine(monkeypatch, tmp_path, "b", "integrity-2")
    assert b.cached("filtered_documents", "s1", "k1") is not None
    m = b.manifest("filtered_documents", "s1")
    part = b.dir("filtered_documents", "s1") / "part-0.parquet"
    assert m[integrity.CHECKSUMS]["part-0.parquet"]["mtime_ns"] == part.stat().st_mtime_ns
    assert m[integrity.CHECKSUMS]["rejected_documents/s1/filter.parquet"]["mtime_ns"] == \
        b.rejected("s1", "filter").stat().st_mtime_ns


def test_yunque_verify_on_a_home_in_the_object_store(s3, tmp_path, monkeypatch):
    """The command on an S3 home, as an operator runs it: every committed version read
    from the store; the damaged one named, exit 1; nothing damaged, exit 0."""
    import subprocess
    import sys

    a = machine(monkeypatch, tmp_path, "a", "integrity-3")
    commit(a)
    home = f"s3://{BUCKET}/integrity-3"
    yunque = [str(Path(sys.executable).with_name("yunque")), "--home", home, "verify"]
    env = {**os.environ, "YUNQUE_CACHE": str(tmp_path / "operator")}
    clean = subprocess.run(yunque, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip().endswith(f"1 outputs checked in {home}: every file matches its checksum")
    version = json.loads(s3.cat(f"{BUCKET}/integrity-3/data/filtered_documents/s1/{MANIFEST}"))["version"]
    side = f"{BUCKET}/integrity-3/data/filtered_documents/s1/{version}/_side/rejected_documents/s1/filter.parquet"
    data = bytearray(s3.cat(side))
    data[len(data) // 2] ^= 0xFF
    s3.pipe(side, bytes(data))
    found = subprocess.run(yunque, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert found.returncode == 1, found.stdout + found.stderr
    assert ("damaged: filtered_documents/s1 (rejected_documents/s1/filter.parquet: checksum; in the store)"
            in found.stdout)


def test_a_moved_home_checks_its_side_files_where_they_are_now(tmp_path):
    """Manifests name side files by absolute path: a home moved since is checked, and
    trusted, at its new place (not a traceback, not a miss)."""
    store = DataStore(tmp_path / "before")
    commit(store)
    (tmp_path / "before").rename(tmp_path / "after")
    moved = DataStore(tmp_path / "after")
    assert moved.damage("filtered_documents", "s1", full=True) is None
    assert moved.cached("filtered_documents", "s1", "k1") is not None
    moved.rejected("s1", "filter").write_bytes(b"not parquet")
    assert moved.damage("filtered_documents", "s1").startswith("rejected_documents/s1/filter.parquet: size")
