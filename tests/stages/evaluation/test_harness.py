"""lm-evaluation-harness offline on a tiny export: the shipped Spanish task made from
domain QA pairs, a user's local task, and the figures as the report shows them. The
socket guard (tests/conftest.py) fails any test whose code reaches past loopback, so a
hidden download fails here."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from model.checkpoint.load import load
from pipelines.tasks.harness_tasks import task_data_files
from stages.evaluation import harness
from stages.evaluation.report import build, markdown
from tests.support import REPO
from tests.support.factory import tiny_checkpoint
from tests.support.user_tasks import user_task


def _pairs(n: int = 8) -> list[dict]:
    topics = ["la red", "los paquetes", "el arranque", "las copias", "el correo", "la impresora", "los usuarios",
              "el cortafuegos", "la memoria", "el disco"]
    return [{"doc_id": f"d{i}", "heading": t, "messages": [
        {"role": "user", "content": f"¿Qué dice el manual sobre {t}?"},
        {"role": "assistant", "content": f"Sobre {t}, el manual explica la configuración paso a paso, caso {i}."}]}
        for i, t in enumerate(topics[:n])]


def test_the_shipped_items_are_multiple_choice_with_the_pairs_own_answer():
    pairs = _pairs()
    items = harness.shipped_items(pairs)
    assert len(items) == len(pairs) and items == harness.shipped_items(pairs)  # the same for the same pairs
    for item, p in zip(items, pairs, strict=True):
        assert len(item["choices"]) == harness.CHOICES == len(set(item["choices"]))
        assert item["choices"][item["answer"]] == p["messages"][-1]["content"]
    assert len({i["answer"] for i in items}) > 1  # the right answer is not always in one place
    assert harness.shipped_items(_pairs(3)) == []  # fewer than 4 distinct answers: no item


def test_the_shipped_task_is_in_the_corpus_language(tmp_path):
    """yunque_<code>_qa, its prompt in the language (qa.toml's [harness]); the Spanish one as
    it always was; another language's task, or one whose pack has no qa.toml, is refused by name."""
    es = (harness.write_shipped_task(_pairs(), tmp_path / "es") / "yunque_es_qa.yaml").read_text()
    assert harness.shipped("es") == harness.SHIPPED == "yunque_es_qa"
    assert 'doc_to_text: "Pregunta: {{question}}\\nRespuesta:"\n' in es
    fr = (harness.write_shipped_task(_pairs(), tmp_path / "fr", "fr") / "yunque_fr_qa.yaml").read_text()
    assert "task: yunque_fr_qa\n" in fr and 'doc_to_text: "Question : {{question}}\\nRéponse :"\n' in fr
    assert (tmp_path / "fr" / "yunque_fr_qa.jsonl").read_text() == (tmp_path / "es" / "yunque_es_qa.jsonl").read_text()
    assert harness.shipped_asked(["yunque_fr_qa", "sumas_es"], "fr") and not harness.shipped_asked(["sumas_es"], "fr")
    with pytest.raises(ValueError, match="ask for yunque_fr_qa"):
        harness.shipped_asked(["yunque_es_qa"], "fr")
    with pytest.raises(ValueError, match="add pipelines/languages/de/qa.toml"):
        harness.shipped_asked(["yunque_de_qa"], "de")


def test_task_data_files_are_found_for_the_enabled_tasks(tmp_path):
    d = user_task(tmp_path)
    assert task_data_files([d], ["sumas_es"]) == {"sumas_es": [d / "sumas.jsonl"]}
    assert task_data_files([d], ["otra"]) == {}
    (d / "sumas.yaml").write_text((d / "sumas.yaml").read_text().replace(str(d / "sumas.jsonl"), "sumas.jsonl"))
    with pytest.raises(ValueError, match="relative data_files .*write absolute paths"):
        task_data_files([d], ["sumas_es"])


def _loglik(model, tok, context: str, continuation: str) -> float:
    """Sum of log p(continuation | context), the way the harness splits the two: the whole
    text encoded, the context's tokens the prefix."""
    whole = tok.encode(context + continuation)
    n = len(tok.encode(context))
    x = torch.tensor([whole[:-1]])
    with torch.no_grad():
        logits, _ = model(x)
    logp = torch.log_softmax(logits[0].float(), -1)
    return sum(float(logp[i - 1, whole[i]]) for i in range(n, len(whole)))


def test_the_harness_scores_the_shipped_task_offline_as_our_model_does(tmp_path):
    """The harness's accuracy on the shipped task equals the accuracy from our own model's
    log-likelihoods of the same choices: it loaded the export, not something else."""
    ckpt = tiny_checkpoint(tmp_path, context=256)  # every item fits: nothing truncated on either side
    task_dir = harness.write_shipped_task(_pairs(), tmp_path / "tasks")
    results = harness.on_checkpoint(ckpt, [harness.SHIPPED], [task_dir])
    got = results[harness.SHIPPED]
    assert got["samples"] == 8 and 0 <= got["acc"] <= 1 and "acc_norm" in got
    loaded = load(ckpt)
    items = [json.loads(x) for x in (task_dir / f"{harness.SHIPPED}.jsonl").read_text().splitlines()]
    ours = []
    for it in items:
        context = f"Pregunta: {it['question']}\nRespuesta:"
        scores = [_loglik(loaded.model, loaded.tokenizer, context, " " + c) for c in it["choices"]]
        ours.append(max(range(len(scores)), key=scores.__getitem__) == it["answer"])
    assert math.isclose(got["acc"], sum(ours) / len(ours), abs_tol=1e-9), (got, ours)
    # the figures as the report's table and markdown show them
    report = build({"grpo_model": {"step": 1, "harness": results}}, {}, 3, 0.5)
    assert report["table"][0]["yunque_es_qa.acc"] == got["acc"]
    assert "yunque_es_qa.acc" in markdown(report) and "lm-evaluation-harness" in markdown(report)


def test_an_unknown_task_is_named(tmp_path):
    ckpt = tiny_checkpoint(tmp_path)
    with pytest.raises(harness.HarnessError, match=r"harness tasks \['no_existe'\] are not defined"):
        harness.on_checkpoint(ckpt, ["no_existe"], [user_task(tmp_path)])


def test_yunque_eval_runs_a_users_task_from_the_command_line(tmp_path):
    ckpt = tiny_checkpoint(tmp_path)
    d = user_task(tmp_path)
    p = subprocess.run([sys.executable, "-m", "yunque.cli", "eval", "--checkpoint", str(ckpt), "--preset", "smoke",
                        "--problems", "2", "--harness", "sumas_es", "--harness-include", str(d), "--json"],
                       capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    row = json.loads(p.stdout)
    assert row["harness"]["sumas_es"]["samples"] == 6 and 0 <= row["harness"]["sumas_es"]["acc"] <= 1
