"""bench/bench_records.py: its corpus is the domain tickets scaled with new ids in three
formats that read alike, its adapter writes our mapping, its check names why texts differ,
and the whole bench runs on a tiny corpus with both sides agreeing on every text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from bench import bench_records
from bench.bench_records import (
    agreement,
    scaled,
    seed_tickets,
    ticket_adapter,
    why_differ,
    write_corpus,
)
from pipelines.config import ReaderConfig
from pipelines.data.corpus import open_corpus
from pipelines.data.readers.shard import read_shard


def test_the_corpus_is_the_tickets_scaled_and_reads_alike_in_every_format(tmp_path: Path):
    seeds = seed_tickets()
    # 27 jsonl records and 27 of the 28 csv rows (the one with a field too many is left out)
    assert len(seeds) == 54 and sum("asunto" not in s for s in seeds) == 1
    records = scaled(seeds, 60)
    assert [r["id"] for r in records[:2]] == ["TK-0000000", "TK-0000001"]
    assert records[54]["asunto"] == records[0]["asunto"] and len({r["id"] for r in records}) == 60
    sizes = write_corpus(tmp_path, records)
    assert sizes["jsonl"] == sizes["jsonl.gz"] == (tmp_path / "jsonl" / "tickets.jsonl").stat().st_size
    lines = (tmp_path / "jsonl" / "tickets.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[59])["id"] == "TK-0000059" and "é" in "".join(lines)  # not \u-escaped

    fs, root = open_corpus(str(tmp_path))
    cfg = ReaderConfig(**bench_records.MAPPING)
    texts = {}
    for shard in bench_records.FILES:
        docs, rejections = read_shard(fs, root, shard, cfg)
        assert len(docs) == 59 and len(rejections) == 1  # the stub (seed 27 of 54)
        texts[shard] = [d.text for d in docs]
    assert texts["jsonl"] == texts["jsonl.gz"] == texts["csv"]
    assert texts["jsonl"][0].startswith(seeds[0]["asunto"] + "\n\nCliente: ")


def test_the_adapter_writes_our_mapping():
    turns = [{"autor": "cliente", "texto": "Hola."}, {"autor": "agente", "texto": None},
             {"autor": "", "texto": "Sin autor."}, {"autor": "sistema", "texto": "Reasignado."}]
    want = "Asunto\n\nCliente: Hola.\n\nSin autor.\n\nSistema: Reasignado."
    jsonl = ticket_adapter(None, {"asunto": "Asunto", "mensajes": turns}, "f", 4)
    cell = ticket_adapter(None, {"asunto": "Asunto", "mensajes": json.dumps(turns, indent=1)}, "f", 4)
    assert jsonl["text"] == cell["text"] == want and jsonl["id"] == "5"
    assert ticket_adapter(None, {"id": "TK-1", "asunto": "", "mensajes": ""}, "f", 0)["text"] == ""


def test_differences_are_matched_by_position_and_named():
    assert why_differ("Asunto\n\nCliente: hola", "Asunto\n\nCliente:  hola ") == "whitespace only"
    assert why_differ("Cliente: hola", "CLIENTE: hola") == "letter case only"
    assert why_differ("Cliente: hola", "Customer: hola") == "other"
    ours = ([SimpleNamespace(source="s/t.jsonl#1", text="a b"), SimpleNamespace(source="s/t.jsonl#2", text="x"),
             SimpleNamespace(source="s/t.jsonl#4", text="Cliente: y")],
            [SimpleNamespace(reason="missing_text_field")])
    theirs = [SimpleNamespace(id="1", text="a  b"), SimpleNamespace(id="2", text="x"),
              SimpleNamespace(id="3", text="z"), SimpleNamespace(id="4", text="Agente: y")]
    a = agreement(ours, theirs)
    assert (a.ours, a.theirs, a.same, a.both) == (3, 4, 1, 3)
    assert a.differ == {"whitespace only": 1, "other": 1} and a.only_theirs == ["3"] and a.only_ours == []
    assert a.rejections == {"missing_text_field": 1}
    assert "record 4 at character 0" in a.example["other"]


def test_the_bench_runs_both_sides_on_every_format_and_they_agree(capsys):
    bench_records.main(["--records", "120", "--rounds", "2", "--breakdown"])
    out = capsys.readouterr().out
    # 120 records hold the stub twice: 118 documents, on both sides, with the same texts
    assert out.count("documents: ours 118 of 120 records") == 3
    assert out.count("datatrove 118 (2 records without text skipped)") == 3
    assert out.count("texts: 118 of 118 documents of both sides the same, 0 differ") == 3
    for fmt in ("jsonl", "jsonl.gz", "csv"):
        assert f"== {fmt}: 120 records" in out
    assert out.count("ours vs datatrove: median") == 3 and out.count("MB/s (range") == 6
    table = re.findall(r"^(jsonl|jsonl\.gz|csv)\s+\|.*\| 0 of 118$", out, re.MULTILINE)
    assert table == ["jsonl", "jsonl.gz", "csv"]
    steps = re.findall(r"^  (ours|datatrove): .* us/record$", out, re.MULTILINE)
    assert steps.count("ours") == 8 and steps.count("datatrove") == 4
