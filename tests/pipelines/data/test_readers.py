"""Bad input: each case becomes a read rejection with a clear reason and detail, the good
files and records beside it are still read, and the raw files are never modified."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import logging
import os
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.config import ReaderConfig
from pipelines.data.corpus import list_shards, open_corpus
from pipelines.data.documents import Document, Rejection
from pipelines.data.readers.shard import READ_REASONS, read_shard

GOOD = "El administrador revisa los archivos de registro cada semana."


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every file under root: reading must change neither."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def read_corpus(
    root: Path, cfg: ReaderConfig | None = None
) -> tuple[list[Document], list[Rejection]]:
    fs, r = open_corpus(str(root))
    docs: list[Document] = []
    rejs: list[Rejection] = []
    for shard in list_shards(fs, r):
        d, j = read_shard(fs, r, shard, cfg or ReaderConfig())
        docs += d
        rejs += j
    return docs, rejs


def check_case(
    tmp_path: Path,
    bad_name: str,
    bad: bytes,
    reason: str,
    cfg: ReaderConfig | None = None,
    also_kept: tuple[str, ...] = (),
) -> Rejection:
    """A shard with one bad file beside good ones; returns the single rejection.
    `also_kept`: good records of the bad file itself (line numbers), which must be kept."""
    shard = tmp_path / "corpus" / "s"
    shard.mkdir(parents=True)
    (shard / "good.txt").write_text(GOOD, encoding="utf-8")
    (shard / "good.jsonl").write_text(json.dumps({"text": GOOD}) + "\n", encoding="utf-8")
    (shard / bad_name).write_bytes(bad)
    before = snapshot(tmp_path / "corpus")
    docs, rejs = read_corpus(tmp_path / "corpus", cfg)
    assert snapshot(tmp_path / "corpus") == before
    kept = ["s/good.jsonl#1", "s/good.txt"] + [f"s/{bad_name}#{n}" for n in also_kept]
    assert sorted(d.source for d in docs) == sorted(kept)
    assert all(d.text == GOOD for d in docs)
    assert len(rejs) == 1, rejs
    rej = rejs[0]
    assert rej.reason == reason and reason in READ_REASONS
    assert rej.stage == "read" and rej.shard == "s"
    assert f"s/{bad_name}" in rej.detail and rej.source.startswith(f"s/{bad_name}")
    return rej


def test_empty_file(tmp_path: Path) -> None:
    rej = check_case(tmp_path, "vacio.txt", b"", "empty_file")
    assert rej.source == "s/vacio.txt" and rej.text is None


@pytest.mark.parametrize(
    ("name", "compress", "message"),
    [
        ("roto.txt.gz", gzip.compress, "end-of-stream"),
        ("roto.jsonl.gz", gzip.compress, "end-of-stream"),
        ("roto.md.zst", lambda b: zstandard.ZstdCompressor().compress(b), "truncated"),
        ("roto.html.bz2", bz2.compress, "end-of-stream"),
        ("roto.parquet.gz", gzip.compress, "end-of-stream"),
    ],
)
def test_truncated_compression(tmp_path: Path, name: str, compress, message: str) -> None:
    # One long line, so that a jsonl file has no complete record before the break.
    payload = json.dumps({"text": " ".join(f"{GOOD} {i}" for i in range(2000))}).encode()
    data = compress(payload)
    rej = check_case(tmp_path, name, data[: len(data) // 2], "decompress_error")
    assert message in rej.detail and rej.source == f"s/{name}" and rej.text is None


def test_truncated_jsonl_keeps_complete_lines_before_the_break(tmp_path: Path) -> None:
    (tmp_path / "c" / "s").mkdir(parents=True)
    lines = [json.dumps({"text": f"{GOOD} {i}"}) for i in range(5000)]
    data = gzip.compress("\n".join(lines).encode())
    (tmp_path / "c" / "s" / "a.jsonl.gz").write_bytes(data[: len(data) // 2])
    docs, rejs = read_corpus(tmp_path / "c")
    assert [r.reason for r in rejs] == ["decompress_error"]
    assert 0 < len(docs) < 5000 and f"after line {len(docs)}" in rejs[0].detail
    assert [d.text for d in docs] == [json.loads(x)["text"] for x in lines[: len(docs)]]


@pytest.mark.parametrize(
    "bad",
    [
        os.urandom(4096),  # random bytes: NUL bytes almost surely
        b"\x01\x02\x03\x1b[0m" * 200 + b"abc",  # no NUL, but control characters throughout
    ],
)
def test_binary_garbage(tmp_path: Path, bad: bytes) -> None:
    rej = check_case(tmp_path, "basura.txt", bad, "binary_content")
    assert "control-character ratio" in rej.detail and rej.text is None


def test_binary_jsonl_record(tmp_path: Path) -> None:
    bad = json.dumps({"text": GOOD}) + "\n" + json.dumps({"text": "\x00\x01\x02" * 50}) + "\n"
    rej = check_case(tmp_path, "mezcla.jsonl", bad.encode(), "binary_content", also_kept=("1",))
    assert rej.source == "s/mezcla.jsonl#2" and "line 2" in rej.detail


def test_invalid_utf8_file(tmp_path: Path) -> None:
    bad = "Configuración de la red".encode("latin-1")
    rej = check_case(tmp_path, "latin1.txt", bad, "invalid_utf8")
    offset = bad.index(b"\xf3")
    assert f"byte offset {offset}" in rej.detail and rej.text is None


def test_invalid_utf8_jsonl_line_only(tmp_path: Path) -> None:
    lines = [
        json.dumps({"text": GOOD}).encode(),
        b'{"text": "caf\xe9"}',
        json.dumps({"text": GOOD}).encode(),
    ]
    body = b"\n".join(lines) + b"\n"
    rej = check_case(tmp_path, "datos.jsonl", body, "invalid_utf8", also_kept=("1", "3"))
    assert rej.source == "s/datos.jsonl#2" and "line 2" in rej.detail
    assert "byte offset 13 of the line" in rej.detail
    assert f"offset {len(lines[0]) + 1 + 13} in the file" in rej.detail


def test_html_declared_charset_is_honoured(tmp_path: Path) -> None:
    (tmp_path / "c" / "s").mkdir(parents=True)
    page = '<html><head><meta charset="ISO-8859-1"></head><body>Configuración</body></html>'
    (tmp_path / "c" / "s" / "a.html").write_bytes(page.encode("latin-1"))
    xhtml = '<?xml version="1.0" encoding="iso-8859-15"?><html><body>Año €</body></html>'
    (tmp_path / "c" / "s" / "b.htm").write_bytes(xhtml.encode("iso-8859-15"))
    (tmp_path / "c" / "s" / "c.txt").write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    (tmp_path / "c" / "s" / "d.md").write_bytes(GOOD.encode("utf-16"))
    docs, rejs = read_corpus(tmp_path / "c")
    assert rejs == []
    assert [d.text for d in docs] == [page, xhtml, GOOD, GOOD]


def test_single_50mb_line(tmp_path: Path) -> None:
    shard = tmp_path / "corpus" / "s"
    shard.mkdir(parents=True)
    (shard / "good.txt").write_text(GOOD, encoding="utf-8")
    good = json.dumps({"text": GOOD}) + "\n"
    with open(shard / "grande.jsonl", "w", encoding="utf-8") as f:
        f.write(good)
        f.write('{"text": "' + "a" * (50 << 20) + '"}\n')
        f.write(good)
    before = snapshot(tmp_path / "corpus")
    tracemalloc.start()
    try:
        docs, rejs = read_corpus(tmp_path / "corpus")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snapshot(tmp_path / "corpus") == before
    # The line streams by: never held whole (nor in several copies).
    assert peak < 20 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert sorted(d.source for d in docs) == ["s/good.txt", "s/grande.jsonl#1", "s/grande.jsonl#3"]
    assert [(r.reason, r.source, r.text) for r in rejs] == [("too_large", "s/grande.jsonl#2", None)]
    assert "s/grande.jsonl line 2" in rejs[0].detail and "max_document_bytes" in rejs[0].detail


@pytest.mark.parametrize("name", ["grande.txt", "grande.txt.gz", "grande.parquet"])
def test_too_large_documents(tmp_path: Path, name: str) -> None:
    big = GOOD * 100
    if name.endswith(".parquet"):
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table({"text": [big]}), buf)
        data = buf.getvalue().to_pybytes()
    else:
        data = big.encode()
        data = gzip.compress(data) if name.endswith(".gz") else data
    rej = check_case(tmp_path, name, data, "too_large", ReaderConfig(max_document_bytes=1000))
    assert rej.text is None and "1000" in rej.detail


def test_malformed_jsonl_among_good(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = json.dumps({"text": GOOD})
    lines = [good, '{"text": "sin cerrar', good, good]
    bad = "".join(line + "\n" for line in lines)
    with caplog.at_level(logging.WARNING, logger="pipelines.data.readers.shard"):
        rej = check_case(
            tmp_path, "mensajes.jsonl", bad.encode(), "malformed_json", also_kept=("1", "3", "4")
        )
    assert rej.source == "s/mensajes.jsonl#2" and "line 2" in rej.detail
    assert "s/mensajes.jsonl line 2" in caplog.text and "malformed_json" in caplog.text


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ('{"title": "sin texto"}', "missing_text_field"),
        ('{"text": 42}', "non_string_text"),
        ('{"text": ""}', "empty_text"),
        ('["una", "lista"]', "malformed_json"),
    ],
)
def test_bad_jsonl_record(tmp_path: Path, record: str, reason: str) -> None:
    body = "\n".join([json.dumps({"text": GOOD}), record]) + "\n"
    rej = check_case(tmp_path, "r.jsonl", body.encode(), reason, also_kept=("1",))
    assert rej.source == "s/r.jsonl#2" and "line 2" in rej.detail
    assert rej.text == ("" if reason == "empty_text" else None)


def test_parquet_without_text_column(tmp_path: Path) -> None:
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"body": ["hola"], "url": ["http://x"]}), buf)
    rej = check_case(tmp_path, "tabla.parquet", buf.getvalue().to_pybytes(), "missing_text_column")
    assert "body" in rej.detail and "url" in rej.detail


def test_unreadable_parquet(tmp_path: Path) -> None:
    rej = check_case(
        tmp_path, "roto.parquet", b"PAR1 this is not parquet at all", "unreadable_parquet"
    )
    assert rej.source == "s/roto.parquet"


def test_parquet_bad_rows(tmp_path: Path) -> None:
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": [GOOD, None, ""]}), buf)
    (tmp_path / "c" / "s").mkdir(parents=True)
    (tmp_path / "c" / "s" / "t.parquet").write_bytes(buf.getvalue().to_pybytes())
    docs, rejs = read_corpus(tmp_path / "c")
    assert [d.source for d in docs] == ["s/t.parquet#1"]
    assert [(r.source, r.reason) for r in rejs] == [
        ("s/t.parquet#2", "missing_text_field"),
        ("s/t.parquet#3", "empty_text"),
    ]


def test_unknown_extension(tmp_path: Path) -> None:
    rej = check_case(tmp_path, "informe.pdf", b"%PDF-1.4 ...", "unknown_format")
    assert ".jsonl" in rej.detail  # says what would have been readable


def test_one_shard_is_found_as_the_full_listing_finds_it(tmp_path: Path) -> None:
    """`CorpusStorage.shard` lists a plain-named shard alone, and falls back to the full
    listing for a name that needs sanitising: the same files and fingerprint either way."""
    import dagster as dg

    from resources import CorpusStorage

    (tmp_path / "manuales" / "sub").mkdir(parents=True)
    (tmp_path / "manuales" / "sub" / "a.txt").write_text("uno", encoding="utf-8")
    (tmp_path / "con espacio").mkdir()
    (tmp_path / "con espacio" / "b.txt").write_text("dos", encoding="utf-8")
    (tmp_path / "suelto.jsonl").write_text('{"text": "tres"}\n', encoding="utf-8")
    corpus = CorpusStorage(uri=str(tmp_path))
    listed = {s.key: s for s in corpus.shards()}
    assert len(listed) == 3 and "con espacio" not in listed
    for key, info in listed.items():
        one = corpus.shard(key)
        assert (one.key, one.files, one.fingerprint, one.path) == (info.key, info.files, info.fingerprint, info.path)
    with pytest.raises(dg.Failure, match="'nada' is registered but no longer found"):
        corpus.shard("nada")


def test_symbolic_links_are_followed_and_the_broken_ones_rejected(tmp_path: Path) -> None:
    """A link to a file reads as that file, a link to a directory as its files (a whole
    shard may be one); a dangling link, a loop of links and a link to a directory that
    holds it are each a rejection that names the link, never skipped unsaid."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "z.txt").write_text("texto enlazado", encoding="utf-8")
    corpus = tmp_path / "corpus"
    shard = corpus / "s1"
    shard.mkdir(parents=True)
    (shard / "a.txt").write_text("hola mundo", encoding="utf-8")
    (shard / "good.txt").symlink_to("a.txt")
    (shard / "linkdir").symlink_to(outside)
    (shard / "dangling.txt").symlink_to("missing.txt")
    (shard / "b.txt").symlink_to("c.txt")
    (shard / "c.txt").symlink_to("b.txt")
    (shard / "selfdir").symlink_to(".")
    (corpus / "s2").symlink_to(outside)  # a shard that is a link

    fs, root = open_corpus(str(corpus))
    shards = {s.key: s for s in list_shards(fs, root)}
    assert sorted(shards) == ["s1", "s2"]
    docs, rejections = read_shard(fs, root, shards["s1"], ReaderConfig())
    assert sorted(d.source for d in docs) == ["s1/a.txt", "s1/good.txt", "s1/linkdir/z.txt"]
    reasons = {r.source: r.reason for r in rejections}
    assert reasons == {"s1/dangling.txt": "broken_symlink", "s1/b.txt": "broken_symlink",
                       "s1/c.txt": "broken_symlink", "s1/selfdir": "symlink_loop"}
    assert all(r.reason in READ_REASONS and r.detail.startswith(str(shard)) for r in rejections)
    docs, rejections = read_shard(fs, root, shards["s2"], ReaderConfig())
    assert [d.source for d in docs] == ["s2/z.txt"] and not rejections


def test_an_unreachable_store_fails_the_read_and_rejects_nothing(monkeypatch) -> None:
    """Past the outage grace, a store that refuses connections is an error of the shard
    (run again later), never a `read_error` rejection recorded for a good document."""
    import s3fs
    from botocore.exceptions import EndpointConnectionError

    from pipelines.data.readers.shard import read_file
    from pipelines.s3_outage import patient

    monkeypatch.setenv("YUNQUE_OUTAGE_GRACE_S", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    fs = patient(s3fs.S3FileSystem(client_kwargs={"endpoint_url": "http://127.0.0.1:1"}, skip_instance_cache=True,
                                   config_kwargs={"retries": {"max_attempts": 1}}))
    fs.retries = 1  # the grace is spent: the first refusal is the last
    with pytest.raises(EndpointConnectionError):
        list(read_file(fs, "bucket/corpus", "s1", "s1/a.txt", 10, ReaderConfig()))
