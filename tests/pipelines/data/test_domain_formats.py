"""The formats domain text comes in: csv / tsv records, the record-to-text mapping of jsonl
and csv (`ReaderConfig.text_fields`, `turns_field`, ...), and the domain corpora of
tests/data/domain (tickets in jsonl and csv, BOE orders, clinical notes) through language
ID, the `domain` filter profile and the domain QA pairs."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipelines.config import FilterConfig, ReaderConfig
from pipelines.data.corpus import open_corpus
from pipelines.data.documents import Document, Rejection
from pipelines.data.extract import normalize_text
from pipelines.data.filters import QualityFilters
from pipelines.data.langid import detect
from pipelines.data.readers.shard import READ_REASONS, read_shard
from pipelines.tasks.domain_qa import build_pairs, conversation
from tests.support import TEST_DATA

DOMAIN = TEST_DATA / "domain" / "corpus"
TICKETS = ReaderConfig(text_fields=["asunto"], turns_field="mensajes", turn_role_keys=["autor"],
                       turn_text_keys=["texto"])
NOTES = ReaderConfig(text_fields=["nota"])
# Records of tests/data/domain that must not be kept (its README says why)
JUNK_TICKETS = {"TK-1900", "TK-1901", "TK-1950"}
JUNK_NOTES = {"NC-2900"}
GOOD = "El técnico revisó la instalación y cambió el router averiado por uno nuevo."


def read(tmp_path: Path, files: dict[str, bytes | str], cfg: ReaderConfig) -> tuple[list[Document], list[Rejection]]:
    """Read one shard `s` holding `files`; every rejection must have a known reason."""
    shard = tmp_path / "c" / "s"
    shard.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        data = content.encode("utf-8") if isinstance(content, str) else content
        (shard / name).write_bytes(data)
    fs, root = open_corpus(str(tmp_path / "c"))
    docs, rejs = read_shard(fs, root, "s", cfg)
    assert all(r.reason in READ_REASONS and r.stage == "read" for r in rejs)
    return docs, rejs


# --- csv / tsv ------------------------------------------------------------------------


def test_csv_one_document_per_row_with_quoted_multiline_fields(tmp_path: Path) -> None:
    body = ('id,text\n1,"Primera línea.\nSegunda línea, con coma."\n\n2,' + GOOD + '\n3,"Dice ""hola""."\n')
    docs, rejs = read(tmp_path, {"a.csv": body, "b.csv.gz": gzip.compress(body.encode())}, ReaderConfig())
    assert rejs == []
    texts = ["Primera línea.\nSegunda línea, con coma.", GOOD, 'Dice "hola".']
    assert [d.text for d in docs] == texts * 2
    assert [d.source for d in docs] == [f"s/a.csv#{n}" for n in (1, 2, 3)] + [f"s/b.csv.gz#{n}" for n in (1, 2, 3)]
    assert {d.format for d in docs} == {"csv"}


@pytest.mark.parametrize(("name", "sep", "cfg"), [
    ("t.tsv", "\t", ReaderConfig()),
    ("t.csv", ";", ReaderConfig()),  # a Spanish-locale spreadsheet: found from the header
    ("t.csv", "|", ReaderConfig(csv_delimiter="|")),
])
def test_csv_separators(tmp_path: Path, name: str, sep: str, cfg: ReaderConfig) -> None:
    body = f"\ufeffid{sep}text{sep}nota\n1{sep}{GOOD}{sep}uno, dos y tres\n"
    docs, rejs = read(tmp_path, {name: body}, cfg)
    assert rejs == [] and [d.text for d in docs] == [GOOD]


def test_a_broken_csv_row_fails_alone_naming_file_row_and_reason(tmp_path: Path) -> None:
    rows = [
        "id,text",
        f"1,{GOOD}",
        '2,"cierra "mal',  # quoting broken
        "3,uno,dos",  # one field too many
        f"4,{GOOD} Dos.",
    ]
    bad_utf8 = b"5,mal \xff byte\n6,bien dicho\n"
    docs, rejs = read(tmp_path, {"r.csv": ("\n".join(rows) + "\n").encode() + bad_utf8}, ReaderConfig())
    assert [d.source for d in docs] == ["s/r.csv#1", "s/r.csv#4", "s/r.csv#6"]
    got = {r.source: (r.reason, r.detail) for r in rejs}
    assert got.keys() == {"s/r.csv#2", "s/r.csv#3", "s/r.csv#5"}
    assert got["s/r.csv#2"][0] == "malformed_csv" and "s/r.csv row 2 (line 3)" in got["s/r.csv#2"][1]
    assert got["s/r.csv#3"][0] == "malformed_csv" and "3 fields, the header has 2" in got["s/r.csv#3"][1]
    reason, detail = got["s/r.csv#5"]
    assert reason == "invalid_utf8" and "row 5 (line 6)" in detail and "'text'" in detail and "\\xff" in detail


def test_csv_file_level_problems(tmp_path: Path) -> None:
    docs, rejs = read(tmp_path, {
        "sin_texto.csv": "id,cuerpo\n1,hola\n",
        "solo_cabecera.csv": "id,text\n",
        "abierta.csv": f'id,text\n1,{GOOD}\n2,"sin cerrar\nnunca\n',
        "nul.csv": f"id,text\n1,con \x00 nul\n2,{GOOD}\n",
    }, ReaderConfig())
    assert sorted(d.source for d in docs) == ["s/abierta.csv#1", "s/nul.csv#2"]
    got = {r.source: r for r in rejs}
    assert got["s/sin_texto.csv"].reason == "missing_text_column"
    assert "['id', 'cuerpo']" in got["s/sin_texto.csv"].detail and "['text']" in got["s/sin_texto.csv"].detail
    assert got["s/solo_cabecera.csv"].reason == "empty_file"
    assert got["s/abierta.csv#2"].reason == "malformed_csv" and "never closed" in got["s/abierta.csv#2"].detail
    assert got["s/nul.csv#1"].reason == "binary_content"


def test_a_csv_row_over_the_size_limit_is_too_large(tmp_path: Path) -> None:
    """A line over the limit is skipped as it streams by; a quoted field of lines under it
    that add up to more is caught once the row is whole."""
    line = "palabra " * 50  # 400 bytes
    body = f'id,text\n1,"{line * 4}"\n2,{GOOD}\n3,"{line}\n{line}\n{line}"\n4,{GOOD}\n'
    docs, rejs = read(tmp_path, {"g.csv": body}, ReaderConfig(max_document_bytes=1000))
    assert [(d.source, d.text) for d in docs] == [("s/g.csv#2", GOOD), ("s/g.csv#4", GOOD)]
    assert [(r.source, r.reason) for r in rejs] == [("s/g.csv#1", "too_large"), ("s/g.csv#3", "too_large")]
    assert "row 3 (line 4)" in rejs[1].detail


# --- the mapping ----------------------------------------------------------------------


def _jsonl(*records: object) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def test_text_fields_in_order_nested_keys_and_absent_fields(tmp_path: Path) -> None:
    cfg = ReaderConfig(text_fields=["ticket.subject", "ticket.body", "notes"])
    docs, rejs = read(tmp_path, {"t.jsonl": _jsonl(
        {"ticket": {"subject": "Router averiado", "body": GOOD}, "notes": "Cerrado."},
        {"ticket": {"body": GOOD}},  # no subject, no notes: the body alone
        {"ticket.subject": "Clave literal", "ticket": {"body": GOOD}},  # a literal dotted key wins
        {"ticket": {"subject": None, "body": "  "}, "notes": None},  # present, but no text
        {"id": 7, "estado": "fusionado"},  # none of the fields
    )}, cfg)
    assert [d.text for d in docs] == [f"Router averiado\n\n{GOOD}\n\nCerrado.", GOOD, f"Clave literal\n\n{GOOD}"]
    (empty, missing) = rejs
    assert empty.reason == "empty_text" and empty.source == "s/t.jsonl#4"
    assert missing.reason == "missing_text_field" and missing.source == "s/t.jsonl#5"
    assert "line 5" in missing.detail and "'ticket.subject', 'ticket.body', 'notes'" in missing.detail
    assert "['estado', 'id']" in missing.detail


def test_the_default_mapping_reads_text_as_before(tmp_path: Path) -> None:
    text = "  Con espacios alrededor.\n\n"
    docs, rejs = read(tmp_path, {"t.jsonl": _jsonl({"text": text, "title": "no se usa"}, {"title": "x"},
                                                   {"text": 3})}, ReaderConfig())
    assert [d.text for d in docs] == [text]
    assert [(r.reason, r.source) for r in rejs] == [("missing_text_field", "s/t.jsonl#2"),
                                                    ("non_string_text", "s/t.jsonl#3")]
    assert "no 'text' field" in rejs[0].detail and "'text' is a int" in rejs[1].detail


def test_turns_are_kept_in_order_as_role_and_text(tmp_path: Path) -> None:
    cfg = ReaderConfig(text_fields=["subject"], turns_field="turns", turn_roles={"agent": "Agente"})
    docs, rejs = read(tmp_path, {"t.jsonl": _jsonl(
        {"subject": "Sin conexión", "turns": [
            {"role": "cliente", "text": "No tengo internet."},
            {"author": "agent", "body": "  Reinicie el router.\nDespués espere dos minutos.  "},
            {"role": "cliente", "text": None, "attachment": "foto.jpg"},  # no words: left out
            {"text": "Nota sin autor."},
        ]},
        {"subject": "Lista", "turns": ["Hola.", "Buenas tardes."]},
        {"subject": "Ya escrita", "turns": "Cliente: hola.\nAgente: adiós."},
        {"subject": "Mal", "turns": [{"role": "cliente", "msg": "sin clave de texto"}]},
        {"subject": "Mal", "turns": {"role": "cliente"}},
        {"subject": "Mal", "turns": [{"role": "cliente", "text": 5}]},
    )}, cfg)
    assert [d.text for d in docs] == [
        ("Sin conexión\n\nCliente: No tengo internet.\n\nAgente: Reinicie el router.\nDespués espere dos "
         "minutos.\n\nNota sin autor."),
        "Lista\n\nHola.\n\nBuenas tardes.",
        "Ya escrita\n\nCliente: hola.\nAgente: adiós.",
    ]
    assert [r.reason for r in rejs] == ["malformed_turns"] * 3
    assert "turns[0] has none of the text keys" in rejs[0].detail and "['msg', 'role']" in rejs[0].detail
    assert "'turns' is a dict, expected a list of turns" in rejs[1].detail
    assert "turns[0]: the text is a int" in rejs[2].detail
    assert all("s/t.jsonl line" in r.detail for r in rejs)


def test_a_csv_turns_cell_holds_a_json_array(tmp_path: Path) -> None:
    turns = json.dumps([{"role": "cliente", "text": "Hola,\nno llega la factura."},
                        {"role": "agente", "text": "Se la reenviamos."}], ensure_ascii=False, indent=1)
    rows = [["asunto", "turnos"], ["Factura", turns], ["Roto", "[{no es json"]]
    with open(tmp_path / "t.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(rows)
    cfg = ReaderConfig(text_fields=["asunto"], turns_field="turnos")
    docs, rejs = read(tmp_path, {"t.csv": (tmp_path / "t.csv").read_bytes()}, cfg)
    assert [d.text for d in docs] == ["Factura\n\nCliente: Hola,\nno llega la factura.\n\nAgente: Se la reenviamos."]
    assert [(r.reason, r.source) for r in rejs] == [("malformed_turns", "s/t.csv#2")]


@pytest.mark.parametrize("bad", [
    {"text_fields": []},
    {"text_fields": [" "]},
    {"turn_text_keys": []},
    {"csv_delimiter": ";;"},
    {"csv_delimiter": '"'},
    {"turns_field": ""},
])
def test_the_mapping_is_validated(bad: dict) -> None:
    with pytest.raises(ValidationError):
        ReaderConfig(**bad)
    assert ReaderConfig(text_fields=[], turns_field="mensajes").turns_field == "mensajes"


# --- the domain corpora ---------------------------------------------------------------


def _domain(tmp_path: Path, shard: str, cfg: ReaderConfig) -> tuple[list[Document], list[Rejection]]:
    shutil.copytree(DOMAIN / shard, tmp_path / "c" / shard)
    fs, root = open_corpus(str(tmp_path / "c"))
    return read_shard(fs, root, shard, cfg)


def _kept(docs: list[Document], profile: str = "domain") -> dict[str, str]:
    """{source: kept text} of the documents that language ID (es >= 0.65) and the profile's
    rules keep, as filtered_documents runs them."""
    texts = [normalize_text(d.text) for d in docs]
    qf = QualityFilters(FilterConfig(profile=profile, language="es"))
    out = {}
    for d, t, (lang, score) in zip(docs, texts, detect(texts)):
        if lang == "es" and score >= 0.65 and (res := qf.apply(t)).keep:
            out[d.source] = res.text
    return out


def _lines(text: str) -> str:
    """The text as C4 hands on a document that lost no line: its non-blank lines, stripped."""
    return "\n".join(x.strip() for x in normalize_text(text).splitlines() if x.strip())


def _ticket_records() -> dict[str, dict]:
    """{source the reader gives: the record} of both ticket files, parsed apart."""
    out = {}
    for n, line in enumerate((DOMAIN / "tickets" / "tickets.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        out[f"tickets/tickets.jsonl#{n}"] = json.loads(line)
    with open(DOMAIN / "tickets" / "tickets.csv", encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.DictReader(f, delimiter=";"), 1):
            if None not in row:  # the broken row: one field too many
                out[f"tickets/tickets.csv#{n}"] = {**row, "mensajes": json.loads(row["mensajes"])}
    return out


def test_the_ticket_corpus_gives_one_document_per_ticket_with_its_turns_in_order(tmp_path: Path) -> None:
    docs, rejs = _domain(tmp_path, "tickets", TICKETS)
    records = _ticket_records()
    assert {r.reason for r in rejs} == {"missing_text_field", "malformed_csv"} and len(rejs) == 2
    assert len(docs) == len(records) - 1 == 53  # the merged-ticket stub has no text
    assert {d.format for d in docs} == {"jsonl", "csv"}
    for d in docs:
        rec = records[d.source]
        turns = [f"{t['autor'].capitalize()}: {t['texto'].strip()}" for t in rec["mensajes"] if t["texto"]]
        assert d.text == "\n\n".join([rec["asunto"], *turns]), d.source


def test_the_ticket_corpus_passes_language_id_and_the_domain_profile(tmp_path: Path) -> None:
    docs, _ = _domain(tmp_path, "tickets", TICKETS)
    ids = {d.source: _ticket_records()[d.source]["id"] for d in docs}
    kept = _kept(docs)
    good = [s for s in ids if ids[s] not in JUNK_TICKETS]
    assert set(kept) == set(good) and len(good) == 50  # every real ticket, none of the junk
    assert all(kept[d.source] == _lines(d.text) for d in docs if d.source in kept)  # no line cut


def test_legal_and_clinical_text_keep_their_short_lines_under_the_domain_profile(tmp_path: Path) -> None:
    """`docs` (C4's line rule) cuts the end of hard-wrapped sentences out of the BOE orders
    and the diagnosis out of a note; `domain` keeps every line of what it keeps."""
    legal, _ = _domain(tmp_path, "legal", ReaderConfig())
    notes, _ = _domain(tmp_path, "clinical", NOTES)
    for docs in (legal, notes):
        for source, text in _kept(docs).items():
            doc = next(d for d in docs if d.source == source)
            assert text == _lines(doc.text), source
    cut = _kept(legal, "docs")["legal/orden-hac-96-2003.txt"].split("\n")
    # "a) Denominación ... y número de identificación fiscal" / "(NIF)." : the item loses its end
    assert "(NIF)." not in cut and "(NIF)." in _lines(next(d.text for d in legal if d.source.endswith("96-2003.txt")))
    assert "Dx: SCASEST." not in _kept(notes, "docs")["clinical/notas.jsonl#1"]
    assert "\nDx: SCASEST.\n" in _kept(notes)["clinical/notas.jsonl#1"]


def test_legal_and_clinical_keep_rates(tmp_path: Path) -> None:
    """The figures of docs/data.md ("Domain records"). Legal: the 2024 order is mostly
    record-layout tables as pdftotext cuts them, dropped for its repeated paragraphs.
    Clinical: three notes with "ºC" / "5º" are dropped by integrity:foreign_script_share,
    which reads the ordinal indicator as a foreign letter (a known false positive)."""
    legal, _ = _domain(tmp_path, "legal", ReaderConfig())
    assert set(_kept(legal)) == {f"legal/{n}.txt" for n in ("orden-hac-96-2003", "orden-eco-97-2003",
                                                           "orden-hfp-886-2023")}
    assert len(_kept(legal, "docs")) == 2  # docs drops Orden HFP/886/2023 for its repeated official names
    notes, _ = _domain(tmp_path, "clinical", NOTES)
    ids = [json.loads(x)["id"] for x in (DOMAIN / "clinical" / "notas.jsonl").read_text(encoding="utf-8").splitlines()]
    kept = _kept(notes)
    assert not any(ids[int(s.rsplit("#", 1)[1]) - 1] in JUNK_NOTES for s in kept)
    assert len(kept) >= 25 and len(kept) > len(_kept(notes, "docs"))


# --- the domain QA pairs ----------------------------------------------------------------


def test_the_domain_qa_pairs_come_from_the_tickets(tmp_path: Path) -> None:
    """A ticket gives one pair in its own words: the customer's first message asks, the
    agent's first reply answers."""
    docs, _ = _domain(tmp_path, "tickets", TICKETS)
    kept = _kept(docs)
    pairs = build_pairs([{"doc_id": d.doc_id, "shard": d.shard, "text": kept[d.source]}
                         for d in docs if d.source in kept])
    records = _ticket_records()
    by_doc = {d.doc_id: records[d.source] for d in docs}
    assert len(pairs) >= 45 and len({p["doc_id"] for p in pairs}) == len(pairs)
    for p in pairs:
        rec = by_doc[p["doc_id"]]
        first = rec["mensajes"][0]
        reply = next(t["texto"] for t in rec["mensajes"] if t["autor"] == "agente")
        assert p["messages"][0]["content"] == first["texto"] and first["autor"] == "cliente"
        assert p["messages"][1]["content"] == reply and p["heading"] == rec["asunto"]


def test_a_conversation_is_told_apart_from_labelled_findings() -> None:
    ticket = ["Sin conexión", "Cliente: No tengo internet.", "Agente: Reinicie el router.", "1. Apáguelo.",
              "Sistema: Reasignado.", "Cliente: Ya funciona."]
    assert [who for who, _ in conversation(ticket)] == ["Cliente", "Agente", "Sistema", "Cliente"]
    assert conversation(ticket)[1][1] == "Reinicie el router.\n1. Apáguelo."
    note = ["Nota de ingreso", "MC: dolor torácico.", "EF: TA 152/91, FC 98 lpm.", "Dx: SCASEST.",
            "Tto: AAS 300 mg."]
    page = ["Configurar la red", "El asistente configura la red.", "Nota: reinicie después.",
            "Sugerencia: use DHCP."]
    assert conversation(note) is None and conversation(page) is None


# --- through the graph ---------------------------------------------------------------------


def test_a_ticket_corpus_in_jsonl_and_csv_reaches_token_shards_and_its_qa_pairs(tmp_path: Path, monkeypatch) -> None:
    """The graph as a user runs it on tickets (jsonl and csv in one shard, mapped by
    reader.text_fields / turns_field, the `domain` profile): every ticket but the planted
    junk reaches token_shards, and the domain QA pairs the SFT mixture takes come from the
    tickets' own turns."""
    import json
    import shutil

    from orchestration.runner import run_graph
    from stages.data.domain_qa import train_pairs
    from stages.store.outputs import DataStore
    from tests.support.factory import SMALL_RUN
    from yunque import env

    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    env.use_home(tmp_path / "home")
    root = tmp_path / "corpus"
    shutil.copytree(DOMAIN / "tickets", root / "tickets")
    overrides = {**json.loads(SMALL_RUN), "filters.profile": "domain", "reader.text_fields": ["asunto"],
                 "reader.turns_field": "mensajes", "reader.turn_role_keys": ["autor"],
                 "reader.turn_text_keys": ["texto"]}
    summary = run_graph(str(root), select="*token_shards", overrides=json.dumps(overrides))
    assert summary.ok, [r.error for r in summary.runs if not r.ok]
    store = DataStore(tmp_path / "home")
    encoded = json.loads((store.dir("token_shards", "tickets") / "_manifest.json").read_text())["stats"]
    assert encoded["docs_in"] >= 48, encoded  # 53 read, 3 junk dropped (language ID, a rule); dedup may take a copy
    pairs = list(train_pairs(store))
    # the customer's first message of each ticket, as the data half hands it on: personal data redacted
    from pipelines.config import PiiConfig
    from pipelines.data.pii import Redactor

    hide = Redactor(PiiConfig(), "es")
    first_turns = {hide.redact(normalize_text(r["mensajes"][0]["texto"])).text
                   for r in _ticket_records().values() if r.get("mensajes")}
    assert len(pairs) >= 30, pairs
    # the customers' e-mails, phones, DNIs and IBANs (tests/data/domain/README.md) reach the pairs as placeholders
    asked = " ".join(p["messages"][0]["content"] for p in pairs)
    assert all(f"<{kind}>" in asked for kind in ("EMAIL", "PHONE", "NATIONAL_ID", "IBAN")), asked
    assert all(" ".join(p["messages"][0]["content"].split()) in {" ".join(t.split()) for t in first_turns}
               for p in pairs), [p["messages"][0]["content"] for p in pairs][:3]
