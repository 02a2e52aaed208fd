"""The whole graph in French, as a user runs it: `yunque run --language fr --preset smoke` on
a small corpus of French manual pages (gimp-help-fr, the held-out set's pages) through the
daemon. The post-training data, the evaluation sets and the model's chat are French.

The canary: a dozen of the pages carry planted personal values (e-mails, phones, IDs,
IBANs, cards, public IPs, credentials; bench.pii_corpus). None of them is in any stored
output after the run (token arrays decoded, tokenizer, checkpoints, quality model, MLflow,
Dagster's event log), and `yunque serve` never completes a prompt that leads to one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.pii_corpus import PlantedDoc, plant
from pipelines import languages
from tests.support.cli import yunque
from tests.support.docs_eval_pages import good_pages
from tests.support.factory import SMALL_EVAL

FR, ES = languages.get("fr"), languages.get("es")
FRENCH_ONLY, SPANISH_ONLY = FR.stop_words - ES.stop_words, ES.stop_words - FR.stop_words


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def frenchness(text: str) -> tuple[int, int]:
    """(French-only stop words, Spanish-only stop words) in `text`."""
    ws = words(text)
    return sum(w in FRENCH_ONLY for w in ws), sum(w in SPANISH_ONLY for w in ws)


CANARY_PAGES = 12


def _canaries(pages: tuple[tuple[str, str], ...]) -> list[PlantedDoc]:
    """The first pages as text with planted values (written as .txt in place of their HTML)."""
    from pipelines.data.extract import html_to_text

    return plant([html_to_text(html, "resiliparse") for _, html in pages[:CANARY_PAGES]], "fr", seed=4242)


@pytest.fixture(scope="module")
def french_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("french_graph")
    corpus = tmp / "corpus"
    pages = good_pages("fr")
    planted = _canaries(pages)
    for i, (source, html) in enumerate(pages):
        path = corpus / ("guide" if i % 2 else "outils") / source.replace("/", "_")
        path.parent.mkdir(parents=True, exist_ok=True)
        if i < CANARY_PAGES:
            path.with_suffix(".txt").write_text(planted[i].text, encoding="utf-8")
        else:
            path.write_text(html, encoding="utf-8")
    home = tmp / "home"
    # smoke, with enough pretraining and SFT for the greeting's reply to be words (seconds on
    # the tiny model): smoke's 20 and 4 steps answer with spaces; a q8_0 GGUF for `yunque serve`
    overrides = {**SMALL_EVAL, "export.gguf": ["q8_0"], "filters.learned.min_documents": 50, "train.steps": 300,
                 "post.sft.steps": 150,
                 "post.sft.batch_size": 8, "post.sft.chitchat": 100}
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--language", "fr", "--preset", "smoke",
               "--overrides", json.dumps(overrides), env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"},
               timeout=1200)  # the whole graph: 4-6 minutes on 2 cores, more on a loaded machine
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return home


@pytest.mark.timeout(1500)
def test_post_training_data_is_french(french_home: Path) -> None:
    mixture = french_home / "data" / "sft_model" / "mixture"
    turns = [json.loads(line) for line in (mixture / "chitchat.jsonl").read_text().splitlines()]
    assert any(t["messages"][0]["content"] == "Bonjour" for t in turns)
    pairs = [json.loads(line) for line in (mixture / "domain_qa.jsonl").read_text().splitlines()]
    assert pairs
    for pair in pairs:
        question = pair["messages"][0]["content"]
        fr, es = frenchness(question + " " + pair["messages"][1]["content"])
        assert fr > es, question


def test_evaluation_sets_are_french(french_home: Path) -> None:
    report = json.loads((french_home / "data" / "eval_report" / "report.json").read_text())
    text = json.dumps(report, ensure_ascii=False)
    assert "fr_add2" in text and "es_add2" not in text
    decontamination = json.loads((french_home / "data" / "eval_contamination" / "report.json").read_text())
    assert "fr_add2" in decontamination["sets"] and "fr_add2_rephrased" in decontamination["sets"]
    # the held-out wordings the report scores: French sentences no training problem uses
    from pipelines.tasks.math_tasks import math_eval_set

    for problem in math_eval_set("fr_add2_rephrased", 8, language="fr"):
        fr, es = frenchness(problem.question)
        assert fr > es or "Combien" in problem.question, problem.question


def test_the_chat_greeting_is_answered_in_french(french_home: Path) -> None:
    """A smoke model says little that makes sense, but what it says is French: its stop
    words are French ones, not Spanish ones."""
    replies = []
    for seed in range(5):
        p = yunque("--home", str(french_home), "generate", "--checkpoint", str(french_home / "data" / "sft_model"),
                   "--prompt", "Bonjour", "--chat", "--max-new-tokens", "64", "--seed", str(seed),
                   "--temperature", "0.8")
        assert p.returncode == 0, p.stderr
        replies.append(p.stdout)
    fr, es = frenchness(" ".join(replies))
    assert fr > es and fr >= 3, replies


# Outputs that hold the corpus as read, kept so that a changed setting re-filters without
# re-reading (stages.data.personal_data): the corpus' own copy, protected like the corpus.
AS_READ = ("raw_documents", "clean_documents")


def _stored_texts(root: Path, skip: tuple[Path, ...]) -> list[tuple[Path, str]]:
    """(file, its text as a reader would find it) for every file under `root`: parquet
    columns as strings, token arrays decoded by their tokenizer, zip members, the rest as
    bytes decoded leniently (sqlite pages, safetensors, GGUF, logs, JSON)."""
    import io
    import zipfile

    import pyarrow.parquet as pq

    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(path.is_relative_to(s) for s in skip):
            continue
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            out.append((path, " ".join(str(v) for col in table.columns for v in col.to_pylist())))
        elif path.suffix == ".zip":
            with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as z:
                out.append((path, " ".join(z.read(n).decode("utf-8", "replace") for n in z.namelist())))
        else:
            out.append((path, path.read_bytes().decode("utf-8", "replace")))
    return out


def _decoded_tokens(home: Path) -> list[tuple[Path, str]]:
    import numpy as np

    from pipelines.tokens.tokenizer import DocumentEncoder

    enc = DocumentEncoder(home / "data" / "tokenizer")
    out = []
    for path in sorted((home / "data" / "token_shards").rglob("*.bin")):
        meta = path.with_suffix(".json")
        dtype = np.uint32 if enc.vocab_size > 65535 else np.uint16
        if meta.exists() and "uint32" in meta.read_text():
            dtype = np.uint32
        out.append((path, enc.decode(np.fromfile(path, dtype=dtype).tolist())))
    return out


def _forms(value: str) -> set[str]:
    """The value as written, and with its separators gone (a number found without spaces
    is still the number)."""
    bare = re.sub(r"[\s.\-()/]", "", value)
    return {value, " ".join(value.split())} | ({bare} if len(bare) >= 8 else set())


def test_no_planted_personal_value_is_stored_or_served(french_home: Path) -> None:
    from tests.support.serve_server import Server, request

    planted = _canaries(good_pages("fr"))
    values = [(kind, v) for doc in planted for kind, v in doc.values]
    assert len({k for k, _ in values}) == 7, values  # every kind is planted
    tmp = french_home.parent
    texts = _stored_texts(tmp, skip=(tmp / "corpus", *(french_home / "data" / a for a in AS_READ)))
    texts += _decoded_tokens(french_home)
    assert any(p.name == "model.zip" for p, _ in texts)  # the learned quality model (its word list) is scanned too
    leaks = [(kind, value, str(path)) for kind, value in values for path, text in texts
             if any(form in text for form in _forms(value))]
    assert leaks == []
    # the kept text has the placeholders where the values were
    kept = " ".join(t for p, t in texts if "deduped_documents" in str(p) and p.suffix == ".parquet")
    assert "<EMAIL>" in kept and "<IBAN>" in kept

    server = Server(tmp / "serve-home", "--model", str(french_home / "data" / "exported_model"), "--quant", "q8_0")
    try:
        for doc in planted:
            for _, value in doc.values:
                before = doc.text[:doc.text.index(value)][-80:]
                status, reply = request(f"{server.url}/v1/completions", {"prompt": before, "max_tokens": 32,
                                                                         "temperature": 0})
                assert status == 200, reply
                said = reply["choices"][0]["text"]
                assert not any(form in said for form in _forms(value)), (before, said)
    finally:
        server.stop()
