"""The same corpus on local disk and on a real S3 protocol server reads identically."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.config import ReaderConfig
from pipelines.data.corpus import list_shards, open_corpus
from pipelines.data.readers.shard import read_shard

PREFIX = "corpus/v1"


def write_corpus(root: Path) -> None:
    (root / "manuales" / "html").mkdir(parents=True)
    (root / "foro").mkdir(parents=True)
    for i in range(3):
        page = f'<html><head><meta charset="utf-8"></head><body><p>Capítulo {i}</p></body></html>'
        (root / "manuales" / "html" / f"p{i}.html").write_text(page, encoding="utf-8")
    (root / "manuales" / "guia.txt").write_text("Guía de instalación.\n", encoding="utf-8")
    lines = [json.dumps({"text": f"Mensaje {i} del foro."}, ensure_ascii=False) for i in range(4)]
    lines.insert(2, '{"text": "sin cerrar')
    (root / "foro" / "mensajes.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": ["fila uno", "fila dos", "fila tres"]}), buf, row_group_size=2)
    (root / "foro" / "tabla.parquet").write_bytes(buf.getvalue().to_pybytes())
    (root / "foro" / "vacio.txt").write_bytes(b"")
    (root / ".complete").write_text("done", encoding="utf-8")


def client(endpoint: str) -> Any:
    # No region_name here: moto mishandles it in client_kwargs; AWS_DEFAULT_REGION applies.
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def upload(s3: Any, bucket: str, root: Path) -> None:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            s3.put_object(
                Bucket=bucket, Key=f"{PREFIX}/{p.relative_to(root).as_posix()}", Body=p.read_bytes()
            )


def read_all(uri: str, options: dict | None = None) -> tuple[list, list, list]:
    fs, root = open_corpus(uri, options)
    shards = list_shards(fs, root)
    docs, rejs = [], []
    for shard in shards:
        d, r = read_shard(fs, root, shard, ReaderConfig())
        docs += [(x.doc_id, x.shard, x.source, x.format, x.text) for x in d]
        rejs += [(x.doc_id, x.shard, x.source, x.reason) for x in r]
    return shards, docs, rejs


def test_s3_corpus_reads_like_local(
    tmp_path: Path, s3_server: str, s3_storage_options: dict
) -> None:
    write_corpus(tmp_path / "c")
    s3 = client(s3_server)
    s3.create_bucket(Bucket="datos")
    upload(s3, "datos", tmp_path / "c")

    local_shards, local_docs, local_rejs = read_all(str(tmp_path / "c"))
    s3_shards, s3_docs, s3_rejs = read_all(f"s3://datos/{PREFIX}", s3_storage_options)

    assert [s.key for s in s3_shards] == ["foro", "manuales"] == [s.key for s in local_shards]
    assert [[f[:2] for f in s.files] for s in s3_shards] == [
        [f[:2] for f in s.files] for s in local_shards
    ]
    assert s3_shards[0].path == f"datos/{PREFIX}/foro"
    assert len(s3_docs) == 4 + 3 + 3 + 1 and s3_docs == local_docs  # jsonl, parquet, html, txt
    assert s3_rejs == local_rejs
    assert sorted(r[3] for r in s3_rejs) == ["empty_file", "malformed_json"]
    assert ("foro/mensajes.jsonl.gz#3", "malformed_json") in [(r[2], r[3]) for r in s3_rejs]


def test_s3_flat_endpoint_option_and_fingerprints(
    tmp_path: Path, s3_server: str, s3_storage_options: dict
) -> None:
    write_corpus(tmp_path / "c")
    s3 = client(s3_server)
    s3.create_bucket(Bucket="cambios")
    upload(s3, "cambios", tmp_path / "c")
    flat = {"endpoint_url": s3_server, "skip_instance_cache": True}
    fs, root = open_corpus(f"s3://cambios/{PREFIX}/", flat)
    before = {s.key: s.fingerprint for s in list_shards(fs, root)}
    assert all(tok for s in list_shards(fs, root) for _, _, tok in s.files)  # ETags

    s3.put_object(Bucket="cambios", Key=f"{PREFIX}/foro/vacio.txt", Body=b"ya no vacio")
    s3.put_object(Bucket="cambios", Key=f"{PREFIX}/nuevo/a.md", Body=b"# nuevo")
    after = {s.key: s.fingerprint for s in list_shards(fs, root)}  # same fs: no stale cache
    assert after["manuales"] == before["manuales"]
    assert after["foro"] != before["foro"]
    assert set(after) == {"foro", "manuales", "nuevo"}
