"""The model half of every language pack (pipelines/languages/<code>/chat.toml, math.toml,
qa.toml), found on disk, not listed: a new language's folder is tested with no code to add.
Each file parses and has the keys the generators read; the math templates use only the
placeholders the code fills, and the held-out wordings are none of the training ones; the
chat has a greeting; the pack's own example document gives the pack's own example
questions. Spanish, the first pack, writes byte for byte what the code wrote before its
texts moved into the pack (tests/pipelines/spanish_snapshot.py). A language without the files still
has a way through: the generators name the file to add, the stages leave the sources out."""

from __future__ import annotations

import gzip
import json
import re
import string

import pytest

from pipelines import languages
from pipelines.tasks import chitchat, domain_qa, math_tasks, packs, post_data
from pipelines.tasks.math_templates import PLACEHOLDERS, wordings
from tests.support import TEST_DATA


def _with(file: str) -> list[str]:
    return [c for c in languages.codes() if (languages.get(c).folder / file).is_file()]


CHAT, MATH, QA = _with(packs.CHAT), _with(packs.MATH), _with(packs.QA)


def test_the_three_first_packs_have_the_whole_model_half():
    assert {"es", "en", "fr"} <= set(CHAT) & set(MATH) & set(QA)


@pytest.mark.parametrize("code, file", [(c, f) for f in (packs.CHAT, packs.MATH, packs.QA) for c in _with(f)])
def test_every_model_file_parses_with_its_keys(code, file):
    raw = packs.texts(code, file)
    assert set(packs.REQUIRED[file]) <= set(raw)


@pytest.mark.parametrize("code", CHAT)
def test_chat_has_a_greeting_and_every_ask_once(code):
    intents = chitchat.intents(code)
    assert "greeting" in intents
    asks = [a for asked, _ in intents.values() for a in asked]
    assert len(asks) == len(set(asks))  # an ask in two intents would be recorded under both
    for asked, replies in intents.values():
        assert asked and replies and all(x.strip() for x in (*asked, *replies))
    records = chitchat.records(code)
    assert len(records) == len(asks) and {r["intent"] for r in records} == set(intents)


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def _sentences(template: str) -> set[str]:
    return {s.strip() for s in re.split(r"(?<=[.?!:])\s+", template) if s.strip()}


@pytest.mark.parametrize("code", MATH)
def test_math_templates_use_what_the_code_fills(code):
    w = wordings(code)
    for op in packs.OPS:
        assert w.templates[op] and w.heldout[op]
        for t in (*w.templates[op], *w.heldout[op]):
            assert _fields(t) <= PLACEHOLDERS, t
            assert {"a", "b"} <= _fields(t), t
            t.format(a=12, b=34, n1="N1", n2="N2", o="O", q="Q", c_sg="C", c_pl="CS")
        assert _fields(w.solutions[op]) <= {"a", "b", "c"}
    assert len(set(w.names)) == len(w.names) >= 2 and w.objects and w.containers
    assert {cls for _, cls in w.objects} <= set(w.question)
    assert _fields(w.answer) == {"c"} and _fields(w.work["carry"]) == {"digit"}
    assert "<think>" in w.instruction and "<answer>" in w.instruction


@pytest.mark.parametrize("code", MATH)
def test_heldout_wordings_reuse_no_training_wording(code):
    """No held-out template is a training one, shares a sentence with one, or starts with a
    training template's first three words: a rephrased problem is new in its wording."""
    w = wordings(code)
    train = [t for op in packs.OPS for t in w.templates[op]]
    held = [t for op in packs.OPS for t in w.heldout[op]]
    assert not set(train) & set(held)
    assert not set().union(*map(_sentences, train)) & set().union(*map(_sentences, held))
    starts = {" ".join(t.split()[:3]) for t in train}
    assert not starts & {" ".join(t.split()[:3]) for t in held}


@pytest.mark.parametrize("code", MATH)
def test_problems_in_the_language_check_out(code):
    train = math_tasks.word_problems(300, "train", "mixed", 0, language=code)
    rephrased = math_tasks.math_eval_set("mixed_rephrased", 60, language=code)
    assert rephrased == math_tasks.math_eval_set(f"{code}_mixed_rephrased", 60)
    for p in train + rephrased:
        op, a, b = re.fullmatch(rf"{code}:(\d+)([-+×])(\d+):[th]\d+:[0-9a-f]{{8}}", p.id).group(2, 1, 3)
        assert p.answer == {"+": int(a) + int(b), "-": int(a) - int(b), "×": int(a) * int(b)}[op]
        assert p.source.startswith(f"{code}_arith/") and "{" not in p.question
        assert p.solution.endswith(f"= {int(p.answer)}.") or p.solution.endswith(
            wordings(code).answer.format(c=int(p.answer)))
    assert {q.question for q in train}.isdisjoint(q.question for q in rephrased)
    # the SFT conversations and preference pairs in the language, and a slipped column worked in it
    sft = post_data.math_sft(5, "add2", 0, code)
    assert sft[0][0]["content"].endswith(wordings(code).instruction)
    prefs = post_data.math_preferences(40, "add2", 0, code)
    slipped = [p for p in prefs if p.kind == "wrong_step"]
    assert slipped and all(wordings(code).work["units"] in p.rejected for p in slipped)


@pytest.mark.parametrize("code", QA)
def test_the_example_document_gives_the_example_questions(code):
    example = packs.texts(code, packs.QA)["example"]
    pairs = domain_qa.build_pairs([{"doc_id": "example", "shard": code, "text": example["document"]}], language=code)
    assert [p["messages"][0]["content"] for p in pairs] == example["questions"]
    assert len(pairs) >= 3  # at least an action, a subject and a question heading
    g = domain_qa.grammar(code)
    for t in (*g.how, *g.about, *g.what):
        assert _fields(t) == {"x"}, t
    assert _fields(g.context) == {"x", "title"}


def test_heading_shapes_in_english_and_french():
    en, fr = domain_qa.grammar("en"), domain_qa.grammar("fr")
    how_en = {t.format(x="configure the network") for t in en.how}
    for heading in ("Configuring the network", "Configure the network", "How to configure the network",
                    "To configure the network"):
        assert domain_qa.question_for(heading, "", "d", language="en") in how_en, heading
    assert "How do I configure the network?" in how_en
    assert domain_qa.question_for("Running the server", "", "d", language="en") in {
        t.format(x="run the server") for t in en.how}
    assert domain_qa.question_for("Network settings", "", "d", language="en") in {
        t.format(x="network settings") for t in en.about}
    how_fr = {t.format(x="configurer le réseau") for t in fr.how}
    assert "Comment puis-je configurer le réseau ?" in how_fr
    for heading in ("Configurer le réseau", "Pour configurer le réseau"):
        assert domain_qa.question_for(heading, "", "d", language="fr") in how_fr
    for noun in ("Fichier de configuration", "Barre d'outils", "Paramètre du pinceau", "Dictionnaire des termes"):
        assert domain_qa.question_for(noun, "", "d", language="fr") in {
            t.format(x=noun[0].lower() + noun[1:]) for t in fr.about}, noun
    assert domain_qa.question_for("Qu'est-ce qu'un calque?", "", "d", language="fr") == "Qu'est-ce qu'un calque ?"
    assert domain_qa.question_for("What is a layer ?", "", "d", language="en") == "What is a layer?"
    assert domain_qa.strip_number("Chapitre 4. Réseaux", "fr") == "Réseaux"
    assert not domain_qa.is_heading("Tableau 11.1. Outils de conversion", language="fr")


def test_spanish_writes_what_it_wrote_before_its_texts_moved():
    """Chat records, a fixed seed's math problems (training and held-out wordings, every
    level, the SFT and preference sets) and the QA pairs of fixed documents, byte for byte
    as the code wrote them with the Spanish texts inside the Python modules."""
    from tests.pipelines.spanish_snapshot import snapshot

    with gzip.open(TEST_DATA / "es_model_half.json.gz") as f:
        before = json.loads(f.read())
    now = snapshot()
    assert now.keys() == before.keys()
    for key in before:
        assert now[key] == before[key], key


def test_a_language_without_the_model_half_says_what_to_add():
    bare = [c for c in languages.codes() if c not in CHAT and c not in MATH and c not in QA]
    if not bare:
        pytest.skip("every pack has the model half")
    code = bare[0]
    line = packs.left_out(code)
    assert line == (f"language {code} has no chat.toml, math.toml, qa.toml: conversational turns, math word problems "
                    f"and questions from the corpus' headings are left out; add pipelines/languages/{code}/chat.toml "
                    f"pipelines/languages/{code}/math.toml pipelines/languages/{code}/qa.toml (as "
                    "pipelines/languages/es/ has them) to train on them")
    assert packs.left_out("es") is None
    for call in (lambda: chitchat.records(code), lambda: math_tasks.word_problems(1, language=code),
                 lambda: domain_qa.build_pairs([{"doc_id": "d", "text": "Titel\nText."}], language=code)):
        with pytest.raises(packs.MissingText, match=f"add pipelines/languages/{code}/"):
            call()
    assert math_tasks.eval_set_name("add2", code) is None and math_tasks.eval_set_name("add2", "fr") == "fr_add2"
