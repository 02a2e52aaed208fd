"""The whole graph in French, as a user runs it: `yunque run --language fr --preset smoke` on
a small corpus of French manual pages (gimp-help-fr, the held-out set's pages) through the
daemon. The post-training data, the evaluation sets and the model's chat are French."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipelines import languages
from tests.docs_eval_pages import good_pages
from tests.factory import SMALL_EVAL
from tests.test_cli import yunque

FR, ES = languages.get("fr"), languages.get("es")
FRENCH_ONLY, SPANISH_ONLY = FR.stop_words - ES.stop_words, ES.stop_words - FR.stop_words


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def frenchness(text: str) -> tuple[int, int]:
    """(French-only stop words, Spanish-only stop words) in `text`."""
    ws = words(text)
    return sum(w in FRENCH_ONLY for w in ws), sum(w in SPANISH_ONLY for w in ws)


@pytest.fixture(scope="module")
def french_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("french_graph")
    corpus = tmp / "corpus"
    for i, (source, html) in enumerate(good_pages("fr")):
        path = corpus / ("guide" if i % 2 else "outils") / source.replace("/", "_")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    home = tmp / "home"
    # smoke, with enough pretraining and SFT for the greeting's reply to be words (seconds on
    # the tiny model): smoke's 20 and 4 steps answer with spaces
    overrides = {**SMALL_EVAL, "export.gguf": [], "train.steps": 300, "post.sft.steps": 150,
                 "post.sft.batch_size": 8, "post.sft.chitchat": 100}
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--language", "fr", "--preset", "smoke",
               "--overrides", json.dumps(overrides), env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"})
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
