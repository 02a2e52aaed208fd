"""A damaged output, as an operator meets it, through the real commands: `yunque run`
names it and rebuilds it, `yunque verify` finds it and `--repair` rebuilds it, and in
every case the kept documents and token arrays equal a clean run's.

The tests share one home and run in order; each leaves it repaired."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.support.cli import home_outputs, run_cli
from tests.support.factory import write_two_shards
from tests.support.ui_server import REPO, YUNQUE, ui_env

DATA_HALF = "*token_shards"


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def _verify(home, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([YUNQUE, "--home", str(home), "verify", *flags], cwd=REPO, env=ui_env(home),
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A corpus, a home with the data half of a clean run over it, and its outputs."""
    root = tmp_path_factory.mktemp("repair")
    write_two_shards(root / "corpus")
    home = root / "home"
    _ok(run_cli(home, root / "corpus", DATA_HALF))
    return root / "corpus", home, home_outputs(home)


def test_a_cut_file_is_named_and_rebuilt_by_the_next_run(clean):
    corpus, home, want = clean
    part = home / "data" / "deduped_documents" / "foro" / "part-0.parquet"
    size = part.stat().st_size
    part.write_bytes(part.read_bytes()[: size // 2])

    found = _verify(home)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"damaged: deduped_documents/foro (part-0.parquet: size {size // 2:,} bytes, committed {size:,}; here)" \
        in found.stdout
    assert "yunque verify --repair" in found.stdout

    out = _ok(run_cli(home, corpus, DATA_HALF))
    assert (f"damaged: deduped_documents/foro (part-0.parquet: size {size // 2:,} bytes, committed {size:,}); "
            "rebuilding") in out
    assert home_outputs(home) == want
    assert _verify(home).returncode == 0
    assert "nothing changed" in _ok(run_cli(home, corpus, DATA_HALF))


def test_verify_repair_rebuilds_what_only_the_checksum_sees(clean):
    """Same size, same mtime, other bytes: the plan's cheap check passes it; verify reads
    every byte, and --repair rebuilds it and the data outputs downstream that the home has."""
    _, home, want = clean
    part = home / "data" / "clean_documents" / "manuales" / "part-0.parquet"
    st = part.stat()
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))

    done = _verify(home, "--repair")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "damaged: clean_documents/manuales (part-0.parquet: checksum; here)" in done.stdout
    assert ("repairing: yunque run --select 'key:clean_documents or key:dedup_index or key:deduped_documents or "
            "key:filtered_documents or key:minhash_signatures or key:quality_model or key:token_shards or "
            "key:tokenizer'") in done.stdout
    assert done.stdout.rstrip().endswith("every file matches its checksum")
    assert home_outputs(home) == want


def test_damage_upstream_and_a_new_copy_elsewhere_keep_the_text_once(clean, tmp_path):
    """Garbage over a shard's filtered documents, then a new shard holding a copy of one
    of its documents: the run rebuilds the damaged shard before the index decides, so
    the text is kept once, as a clean run over the three shards keeps it."""
    corpus, home, _ = clean
    grown = tmp_path / "corpus"
    shutil.copytree(corpus, grown)
    (grown / "nuevo").mkdir()
    shutil.copy(grown / "manuales" / "notas.md", grown / "nuevo" / "copia.md")
    part = home / "data" / "filtered_documents" / "manuales" / "part-0.parquet"
    part.write_bytes(os.urandom(part.stat().st_size))  # the same size: the checksum tells

    out = _ok(run_cli(home, grown, DATA_HALF))
    assert "damaged: filtered_documents/manuales (part-0.parquet: checksum); rebuilding" in out
    fresh = tmp_path / "fresh"
    _ok(run_cli(fresh, grown, DATA_HALF))
    # the kept documents (the token arrays differ: the tokenizer, trained once, saw two shards here)
    got, want = ({k: v for k, v in home_outputs(h).items() if k.startswith("deduped/")} for h in (home, fresh))
    assert got == want
    kept = [d for k, v in got.items() if k.startswith("deduped/") for d in v]
    assert len(kept) == len(set(kept)) and len(got["deduped/nuevo"]) + len(got["deduped/manuales"]) > 0


def test_a_version_damaged_in_the_object_store_is_found_and_repaired(s3, tmp_path):
    """A home in the bucket: an object of a committed version damaged in the store (the
    cache that wrote it still holds a good copy); `yunque verify` reads the store's bytes
    and names it, `--repair` takes the version out of the committed set and rebuilds it,
    and the kept documents are those of the clean run."""
    import pyarrow.parquet as pq

    from stages.store.outputs import DataStore
    from tests.conftest import HOME_BUCKET
    from tests.support.factory import SMALL_RUN
    from tests.support.ui_server import FAST

    write_two_shards(tmp_path / "corpus")
    home = f"s3://{HOME_BUCKET}/repair"
    env = {k: v for k, v in os.environ.items() if k not in ("YUNQUE_HOME", "DAGSTER_HOME")}
    env |= {**FAST, "YUNQUE_CACHE": str(tmp_path / "cache")}

    def yunque(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([YUNQUE, "--home", home, *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900, check=False)

    _ok(yunque("run", "--corpus", str(tmp_path / "corpus"), "--select", "*deduped_documents", "--overrides",
               SMALL_RUN))

    def kept(cache: str) -> dict[str, list[str]]:
        os.environ["YUNQUE_CACHE"] = str(tmp_path / cache)
        try:
            store = DataStore(home)
            return {s: sorted(pq.read_table(store.part("deduped_documents", s), columns=["doc_id"])["doc_id"]
                              .to_pylist()) for s in ("foro", "manuales")}
        finally:
            os.environ.pop("YUNQUE_CACHE")

    want = kept("reader-1")
    manifest = json.loads(s3.cat(f"{HOME_BUCKET}/repair/data/deduped_documents/foro/_manifest.json"))
    obj = f"{HOME_BUCKET}/repair/data/deduped_documents/foro/{manifest['version']}/part-0.parquet"
    data = s3.cat(obj)
    s3.pipe(obj, data[: len(data) // 2])

    found = yunque("verify")
    assert found.returncode == 1, found.stdout + found.stderr
    assert (f"damaged: deduped_documents/foro (part-0.parquet: size {len(data) // 2:,} bytes, committed "
            f"{len(data):,}; in the store)") in found.stdout
    repaired = yunque("verify", "--repair")
    assert repaired.returncode == 0, repaired.stdout[-3000:] + repaired.stderr[-3000:]
    assert "repairing: yunque run --select 'key:deduped_documents'" in repaired.stdout
    assert repaired.stdout.rstrip().endswith("every file matches its checksum")
    assert kept("reader-2") == want
