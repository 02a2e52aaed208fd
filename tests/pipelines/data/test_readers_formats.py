"""Every format and compression reads back its text; sources, doc ids, shards and
fingerprints follow the corpus conventions."""

from __future__ import annotations

import bz2
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.config import ReaderConfig
from pipelines.data.corpus import list_shard_files, list_shards, open_corpus, shard_key
from pipelines.data.readers.shard import detect_format, iter_shard, read_shard

TEXTS = ["Primera línea del manual.\nSegunda línea.", "El núcleo se actualiza.", "¿Año 2024?"]

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "": lambda b: b,
    ".gz": gzip.compress,
    ".zst": lambda b: zstandard.ZstdCompressor().compress(b),
    ".bz2": bz2.compress,
}


def encode(fmt: str, texts: list[str]) -> bytes:
    if fmt == "jsonl":
        return "".join(
            json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)
        ).encode()
    if fmt == "parquet":
        buf = pa.BufferOutputStream()
        pq.write_table(
            pa.table({"id": list(range(len(texts))), "text": texts}), buf, row_group_size=2
        )
        return buf.getvalue().to_pybytes()
    return texts[0].encode()


@pytest.mark.parametrize("comp", list(COMPRESSORS))
@pytest.mark.parametrize("fmt", ["html", "htm", "txt", "md", "jsonl", "parquet"])
def test_every_format_and_compression(tmp_path: Path, fmt: str, comp: str) -> None:
    shard = tmp_path / "c" / "s" / "sub"
    shard.mkdir(parents=True)
    name = f"doc.{fmt}{comp}"
    (shard / name).write_bytes(COMPRESSORS[comp](encode(fmt, TEXTS)))
    fs, root = open_corpus(str(tmp_path / "c"))
    docs, rejs = read_shard(fs, root, "s", ReaderConfig())
    assert rejs == []
    multi = fmt in ("jsonl", "parquet")
    expected = TEXTS if multi else TEXTS[:1]
    assert [d.text for d in docs] == expected
    want_sources = [f"s/sub/{name}#{i}" for i in range(1, 4)] if multi else [f"s/sub/{name}"]
    assert [d.source for d in docs] == want_sources
    assert {d.format for d in docs} == {"html" if fmt == "htm" else fmt}
    assert {d.shard for d in docs} == {"s"}


def test_detect_format() -> None:
    assert detect_format("a/b.JSONL.GZ") == ("jsonl", "gzip")
    assert detect_format("a/b.tar.gz") == (None, "gzip")
    assert detect_format("x.zstd") == (None, "zstd")
    assert detect_format("x.md.zstd") == ("md", "zstd")


def test_line_numbers_count_physical_lines(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    body = (
        '{"text": "uno"}\r\n\n{"text": "tres"}\n   \n{"text": "cinco"}'  # CRLF, blanks, no final \n
    )
    (tmp_path / "c" / "a.jsonl").write_text(body, encoding="utf-8")
    fs, root = open_corpus(str(tmp_path / "c"))
    docs, rejs = read_shard(fs, root, "a.jsonl", ReaderConfig())
    assert rejs == []
    assert [(d.source, d.text) for d in docs] == [
        ("a.jsonl#1", "uno"),
        ("a.jsonl#3", "tres"),
        ("a.jsonl#5", "cinco"),
    ]


def test_doc_ids_stable_and_content_sensitive(tmp_path: Path) -> None:
    root_dir = tmp_path / "c"
    (root_dir / "s").mkdir(parents=True)
    (root_dir / "s" / "a.txt").write_text("mismo texto", encoding="utf-8")
    (root_dir / "s" / "b.txt").write_text("mismo texto", encoding="utf-8")
    fs, root = open_corpus(str(root_dir))
    first = [d.doc_id for d in read_shard(fs, root, "s", ReaderConfig())[0]]
    again = [d.doc_id for d in read_shard(fs, root, "s", ReaderConfig())[0]]
    assert first == again
    assert len(set(first)) == 2  # same bytes in two files are two documents
    (root_dir / "s" / "a.txt").write_text("otro texto", encoding="utf-8")
    changed = [d.doc_id for d in read_shard(fs, root, "s", ReaderConfig())[0]]
    assert changed[0] != first[0] and changed[1] == first[1]


def test_iter_shard_streams_in_file_order(tmp_path: Path) -> None:
    (tmp_path / "c" / "s").mkdir(parents=True)
    for name in ["b.txt", "a.txt", "c.txt"]:
        (tmp_path / "c" / "s" / name).write_text(name, encoding="utf-8")
    fs, root = open_corpus(str(tmp_path / "c"))
    shard = list_shards(fs, root)[0]
    assert [x.source for x in iter_shard(fs, root, shard, ReaderConfig(), progress=True)] == [
        "s/a.txt",
        "s/b.txt",
        "s/c.txt",
    ]


def make_corpus(root: Path) -> None:
    (root / "manuales" / "html").mkdir(parents=True)
    (root / "manuales" / "html" / "p1.html").write_text("<p>uno</p>", encoding="utf-8")
    (root / "manuales" / "guia.txt").write_text("guía", encoding="utf-8")
    (root / "manuales" / ".cache").mkdir()
    (root / "manuales" / ".cache" / "x.txt").write_text("oculto", encoding="utf-8")
    (root / "manuales" / ".DS_Store").write_bytes(b"\0\0")
    (root / "suelto.jsonl").write_text('{"text": "hola"}\n', encoding="utf-8")
    (root / ".complete").write_text("", encoding="utf-8")
    (root / ".staging").mkdir()
    (root / ".staging" / "a.txt").write_text("a medias", encoding="utf-8")
    (root / "_tmp").mkdir()
    (root / "_tmp" / "a.txt").write_text("temporal", encoding="utf-8")
    (root / "foro con espacios").mkdir()
    (root / "foro con espacios" / "m.md").write_text("# hola", encoding="utf-8")
    (root / "vacio").mkdir()  # no files: not a shard (as on S3, which has no empty dirs)


def test_list_shards(tmp_path: Path) -> None:
    make_corpus(tmp_path / "c")
    fs, root = open_corpus(str(tmp_path / "c") + "/")
    shards = list_shards(fs, root)
    assert [s.name for s in shards] == ["foro con espacios", "manuales", "suelto.jsonl"]
    by_name = {s.name: s for s in shards}
    assert [f[0] for f in by_name["manuales"].files] == [
        "manuales/guia.txt",
        "manuales/html/p1.html",
    ]
    assert by_name["suelto.jsonl"].files[0][:2] == ("suelto.jsonl", 17)
    assert by_name["suelto.jsonl"].key == "suelto.jsonl"
    assert by_name["manuales"].path == f"{root}/manuales"
    key = by_name["foro con espacios"].key
    assert key.startswith("foro_con_espacios-") and key == shard_key("foro con espacios")
    assert list_shard_files(fs, root, "manuales") == by_name["manuales"].files
    docs, rejs = read_shard(fs, root, by_name["foro con espacios"], ReaderConfig())
    assert rejs == [] and docs[0].shard == key and docs[0].source == "foro con espacios/m.md"


def test_shard_keys_are_plain_and_collision_safe() -> None:
    names = ["a b", "a_b", "a/b", "español", "a.b-c_d", "x" * 300, "x" * 301]
    keys = [shard_key(n) for n in names]
    assert len(set(keys)) == len(keys)
    assert all(
        len(k) <= 120 and all(c.isascii() and (c.isalnum() or c in "_.-") for c in k) for k in keys
    )
    assert shard_key("a_b") == "a_b" and shard_key("a.b-c_d") == "a.b-c_d"
    assert shard_key("a b") == shard_key("a b")  # deterministic


def test_fingerprint_tracks_changes(tmp_path: Path) -> None:
    root_dir = tmp_path / "c"
    make_corpus(root_dir)
    fs, root = open_corpus(str(root_dir))

    def fp() -> str:
        return {s.name: s.fingerprint for s in list_shards(fs, root)}["manuales"]

    base = fp()
    assert fp() == base  # listing twice changes nothing
    guia = root_dir / "manuales" / "guia.txt"
    guia.write_text("guiá", encoding="utf-8")  # same size, new bytes
    st = guia.stat()
    os.utime(guia, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    modified = fp()
    assert modified != base
    (root_dir / "manuales" / "nuevo.md").write_text("nuevo", encoding="utf-8")
    added = fp()
    assert added not in (base, modified)
    (root_dir / "manuales" / "nuevo.md").unlink()
    assert fp() == modified
    (root_dir / "manuales" / ".tmp-upload").write_text("x", encoding="utf-8")
    assert fp() == modified  # dotfiles are not part of the shard
