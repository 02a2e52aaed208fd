"""A damaged output, as an operator meets it, through the real commands: `yunque run`
names it and rebuilds it, `yunque verify` finds it and `--repair` rebuilds it, and in
every case the kept documents and token arrays equal a clean run's.

The tests share one home and run in order; each leaves it repaired."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.factory import write_two_shards
from tests.test_operate import _outputs, _run_cli
from tests.ui_server import REPO, YUNQUE, ui_env

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
    _ok(_run_cli(home, root / "corpus", DATA_HALF))
    return root / "corpus", home, _outputs(home)


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

    out = _ok(_run_cli(home, corpus, DATA_HALF))
    assert (f"damaged: deduped_documents/foro (part-0.parquet: size {size // 2:,} bytes, committed {size:,}); "
            "rebuilding") in out
    assert _outputs(home) == want
    assert _verify(home).returncode == 0
    assert "nothing changed" in _ok(_run_cli(home, corpus, DATA_HALF))


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
    assert _outputs(home) == want


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

    out = _ok(_run_cli(home, grown, DATA_HALF))
    assert "damaged: filtered_documents/manuales (part-0.parquet: checksum); rebuilding" in out
    fresh = tmp_path / "fresh"
    _ok(_run_cli(fresh, grown, DATA_HALF))
    # the kept documents (the token arrays differ: the tokenizer, trained once, saw two shards here)
    got, want = ({k: v for k, v in _outputs(h).items() if k.startswith("deduped/")} for h in (home, fresh))
    assert got == want
    kept = [d for k, v in got.items() if k.startswith("deduped/") for d in v]
    assert len(kept) == len(set(kept)) and len(got["deduped/nuevo"]) + len(got["deduped/manuales"]) > 0
