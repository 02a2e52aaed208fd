"""Instruction data from the user's documents: headings to questions, sections to answers,
the train/validation separation, the built-in conversational turns, and the domain QA
score of the evaluation report."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest

from pipelines.tasks import chitchat
from pipelines.tasks.domain_qa import (
    QAOptions,
    answer_text,
    build_pairs,
    document_pairs,
    grammar,
    is_heading,
    question_for,
    strip_number,
)

HOW, ABOUT = grammar("es").how, grammar("es").about
from pipelines.tasks.post_data import read_sft

BODY = ("Este apartado explica con detalle el procedimiento completo, paso a paso, para que el sistema funcione "
        "sin problemas en la mayoría de los casos.")
BODY2 = "Después de hacerlo, compruebe el resultado con la orden correspondiente y revise el registro del sistema."


def _doc(*lines: str) -> str:
    return "\n".join(lines)


def test_heading_shapes():
    assert is_heading("Configurar la red") and is_heading("3.2. Configurar la red")
    assert is_heading("Capítulo 4. Redes y cortafuegos") and is_heading("FORMATO DE ENTRADA")
    assert is_heading("¿Qué es Transmission?")
    assert not is_heading("Esto es una frase completa.")  # terminal punctuation
    assert not is_heading("la continuación de una línea")  # lower case
    assert not is_heading("Un fragmento que acaba en la")  # a connector: a wrapped line
    assert not is_heading("Tabla 11.1. Herramientas de conversión")  # a caption
    assert not is_heading(" ".join(["Palabra"] * 13))  # too long
    assert not is_heading("ARG1 <= ARG2") and not is_heading("Vaya a Insertar ▸ Campo")
    assert strip_number("3.2. Configurar la red") == "Configurar la red"
    assert strip_number("Capítulo 4. Redes") == "Redes" and strip_number("2.1 Instalar") == "Instalar"


def test_questions_by_heading_shape():
    q = question_for("Configurar la red", "", "doc-1", BODY)
    assert q in {t.format(x="configurar la red") for t in HOW}
    q = question_for("Opciones de impresión avanzadas", "", "doc-1", BODY)
    assert q in {t.format(x="opciones de impresión avanzadas") for t in ABOUT}
    # a name keeps its capital (it is written so mid-sentence); a short heading gets the title as context
    q = question_for("Transmission y sus puertos", "FreedomBox", "d", "Para usar Transmission, abra el puerto.")
    assert "Transmission y sus puertos" in q
    assert "ejemplos en GitWeb" in question_for("Ejemplos", "GitWeb", "d", BODY)
    assert question_for("¿Qué es Transmission ?", "", "d") == "¿Qué es Transmission?"
    assert question_for("Para definir un estilo nuevo", "", "d").rstrip("?.").endswith("definir un estilo nuevo")


def test_phrasing_varies_across_documents_and_is_deterministic():
    qs = {question_for("Instalar paquetes desde el repositorio", "", f"doc-{i}") for i in range(40)}
    assert len(qs) >= 4
    qs = {question_for("Las copias de seguridad del sistema", "", f"doc-{i}") for i in range(40)}
    assert len(qs) >= 4
    assert question_for("Instalar paquetes", "", "doc-7") == question_for("Instalar paquetes", "", "doc-7")


def test_sections_become_pairs_with_provenance():
    text = _doc("Guía de la red", "3.2. Configurar la red", BODY, BODY2, "3.3. Opciones de impresión avanzadas",
                BODY2 + " " + BODY, BODY, "Tabla 3.1. Valores", "$ sudo apt install foo", "Nota final corta")
    pairs = document_pairs("doc-1", "handbook", text)
    assert [p["heading"] for p in pairs] == ["Configurar la red", "Opciones de impresión avanzadas"]
    p = pairs[0]
    assert p["doc_id"] == "doc-1" and p["shard"] == "handbook"
    assert [m["role"] for m in p["messages"]] == ["user", "assistant"]
    assert p["messages"][1]["content"] == BODY + "\n" + BODY2
    assert "configurar la red" in p["messages"][0]["content"]


def test_man_page_gives_what_it_does_and_caps_sections():
    from tests.pipelines.spanish_snapshot import MAN_MEV

    text = _doc(*MAN_MEV)
    pairs = document_pairs("man-mev", "manpages-es", text)
    assert [p["heading"] for p in pairs] == ["mev", "FORMATO DE ENTRADA"]
    what = pairs[0]["messages"][1]["content"]
    assert what.startswith("mev: un programa para informar de los eventos del ratón.")
    assert "tomando como modelo xev." in what  # the wrapped lines re-joined
    assert "formato de entrada en mev" in pairs[1]["messages"][0]["content"]


def test_answer_trimming_and_skipping():
    paras = [f"Párrafo número {i} con suficiente texto para contar como prosa de la documentación." for i in range(9)]
    text = answer_text(paras, QAOptions(max_chars=10_000, max_paragraphs=3, min_chars=20))
    assert text.split("\n") == paras[:3]
    text = answer_text(paras, QAOptions(max_chars=200, min_chars=20))
    assert len(text) <= 200 and text.split("\n") == paras[:len(text.split("\n"))]  # whole paragraphs only
    assert answer_text(["Muy corto."], QAOptions()) is None
    code = ["$ sudo apt install a", "-v  muestra más", "--help  ayuda", "• uno", BODY]
    assert answer_text(code, QAOptions()) is None  # mostly code / options / list
    assert answer_text(["The package is installed with the usual tools and it is ready to use."] * 3, QAOptions(
        min_chars=10)) is None  # English paragraphs are dropped


def test_duplicate_answers_kept_once():
    docs = [{"doc_id": f"d{i}", "shard": "s", "text": _doc(f"Título {i}", "Licencia del programa", BODY)}
            for i in range(3)]
    assert len(build_pairs(docs)) == 1


def _home(tmp_path, docs: dict[str, list[tuple[str, str, str]]]):
    """A home with deduped_documents and token_shards' documents.parquet for each shard:
    {shard: [(doc_id, split, text)]}."""
    from stages.store.outputs import PART, DataStore, StageStats

    store = DataStore(tmp_path / "home")
    for shard, rows in docs.items():  # committed as the stages commit: manifests with checksums
        store.commit("deduped_documents", shard, StageStats(key=f"d-{shard}"), {PART: pa.table(
            {"doc_id": [r[0] for r in rows], "shard": [shard] * len(rows), "text": [r[2] for r in rows]})})
        store.commit("token_shards", shard, StageStats(key=f"t-{shard}"), {"documents.parquet": pa.table(
            {"doc_id": [r[0] for r in rows], "split": [r[1] for r in rows], "index": list(range(len(rows)))})})
    return store


def _section_doc(i: int) -> str:
    return _doc(f"Manual {i}", f"Configurar el servicio número {i}", f"{BODY} Variante {i}.",
                f"Opciones del servicio número {i}", f"{BODY2} Caso {i}.")


def test_no_validation_document_reaches_the_training_pairs(tmp_path):
    from stages.data.domain_qa import heldout_pairs, train_pairs
    from stages.store.outputs import write_jsonl

    split = {i: "val" if i % 3 == 0 else "train" for i in range(12)}
    shared = _doc("Aviso común", "Licencia del programa", BODY)  # boilerplate in both splits
    store = _home(tmp_path, {"a": [(f"a{i}", split[i], _section_doc(i)) for i in range(6)],
                             "b": [(f"b{i}", split[i], _section_doc(i + 6)) for i in range(6, 12)]
                             + [("b-train-shared", "train", shared), ("b-val-shared", "val", shared)]})
    train, held = train_pairs(store), heldout_pairs(store)
    val_ids = {f"{s}{i}" for s in "ab" for i, v in split.items() if v == "val"} | {"b-val-shared"}
    assert train and held
    assert not {p["doc_id"] for p in train} & val_ids
    assert {p["doc_id"] for p in held} <= val_ids
    train_text = " ".join(m["content"] for p in train for m in p["messages"])
    assert all(f"Variante {i}." not in train_text for i, v in split.items() if v == "val")
    # a held-out answer that is also a training answer (boilerplate) is not scored
    assert "b-val-shared" not in {p["doc_id"] for p in held}
    assert heldout_pairs(store, limit=2) == heldout_pairs(store)[:2]
    path = write_jsonl(train, tmp_path / "train.jsonl")
    assert read_sft(path) == [p["messages"] for p in train]
    assert json.loads(path.read_text().splitlines()[0])["shard"] == "a"


def test_conversational_turns():
    convs = chitchat.conversations()
    assert convs == chitchat.conversations() and len(convs) >= 20
    for c in convs:
        assert [m["role"] for m in c] == ["user", "assistant"] and all(m["content"] for m in c)
    asks = {c[0]["content"] for c in convs}
    assert {"Hola", "¿Qué puedes hacer?", "¿Quién eres?", "Gracias", "Adiós"} <= asks
    replies = " ".join(c[1]["content"] for c in convs if c[0]["content"] == "¿Qué puedes hacer?")
    assert "documentación" in replies and "matemáticas" in replies
    assert {r["intent"] for r in chitchat.records()} == set(chitchat.intents())
    assert len(chitchat.records()) == len(convs)


def test_domain_qa_score_on_a_tiny_model(tmp_path):
    torch = pytest.importorskip("torch")
    from model.checkpoint.load import load
    from model.core.batches import collate, encode_reply
    from model.pretrain.downstream import domain_qa
    from tests.support.factory import tiny_checkpoint

    loaded = load(tiny_checkpoint(tmp_path))
    pairs = [{"messages": [{"role": "user", "content": f"¿Cómo configuro el servicio {i}?"},
                           {"role": "assistant", "content": "Edite el fichero y reinicie." * (1 + 10 * (i == 2))}]}
             for i in range(3)]  # the third is longer than the context: cut, still scored
    out = domain_qa(loaded.model, loaded.tokenizer, pairs, batch_size=2)
    assert out["domain_qa_pairs"] == 3 and out["domain_qa_tokens"] > 0
    assert math.isfinite(out["domain_qa_nll"]) and out["domain_qa_ppl"] == pytest.approx(
        math.exp(out["domain_qa_nll"]), rel=1e-3)
    # one pair: the masked mean the model's own loss gives
    batch = collate([encode_reply(loaded.tokenizer, pairs[0]["messages"][:1], pairs[0]["messages"][1]["content"])],
                    loaded.tokenizer.eot_id)
    with torch.inference_mode():
        _, loss = loaded.model(batch.idx, batch.targets)
    assert domain_qa(loaded.model, loaded.tokenizer, pairs[:1])["domain_qa_nll"] == pytest.approx(loss.item(), abs=1e-3)
    assert domain_qa(loaded.model, loaded.tokenizer, [])["domain_qa_nll"] is None


def test_evaluation_scores_the_heldout_pairs(tmp_path):
    pytest.importorskip("torch")
    from stages.config import preset
    from stages.evaluation.evaluate import evaluate_all
    from tests.support.factory import record_base, tiny_checkpoint

    store = _home(tmp_path, {"a": [(f"a{i}", "val" if i % 2 else "train", _section_doc(i)) for i in range(6)]})
    record_base(tiny_checkpoint(store.data))
    cfg = preset("tiny", {"eval.math_problems": 2, "eval.sample_tokens": 4, "eval.math_max_new_tokens": 4,
                          "eval.val_batches": 1})
    row = evaluate_all(store, cfg)["report"]["rows"]["base_model"]
    # one pair per validation document (the second section is too short to be an answer)
    assert row["domain_qa_pairs"] == 3 and math.isfinite(row["domain_qa_nll"])


def test_the_sft_mixture_takes_train_pairs_and_chat_turns_and_the_program_reports_it(tmp_path):
    """stages.training.post_train.sft_sources: corpus pairs only from train documents, capped and
    deterministic, chat turns cycled to their count; the SFT program mixes them with the
    math set and reports conversations and tokens per source."""
    from model.post.config import SFTConfig
    from model.post.sft import SFT
    from stages.store.outputs import write_jsonl
    from stages.training.post_train import sft_sources

    split = {i: "val" if i % 3 == 0 else "train" for i in range(12)}
    store = _home(tmp_path, {"a": [(f"a{i}", split[i], _section_doc(i)) for i in range(12)]})
    shards = [str(store.dir("token_shards", "a"))]
    cfg = SFTConfig(domain_qa=3, chitchat=40, examples=10)
    got = sft_sources(store, cfg, shards)
    assert len(got["domain_qa"]) == 3 and len(got["chitchat"]) == 40
    assert all(split[int(p["doc_id"][1:])] == "train" for p in got["domain_qa"])
    assert got == sft_sources(store, cfg, shards)  # the same sample every time
    assert sft_sources(store, SFTConfig(domain_qa=0, chitchat=0), shards) == {}
    assert "domain_qa" not in sft_sources(store, cfg, ["/elsewhere/other-shard"])  # only the base model's shards

    from model.checkpoint.load import load
    from model.core.parallel import Dist
    from model.post.config import PostRun
    from tests.support.factory import tiny_checkpoint

    loaded = load(tiny_checkpoint(tmp_path / "ckpt", context=384))
    run = PostRun(stage="sft", train=cfg, init="", out=str(tmp_path),
                  mixture={n: str(write_jsonl(r, tmp_path / f"{n}.jsonl")) for n, r in got.items()})
    sft = SFT(cfg, loaded, Dist(), run, lambda **_: None)
    plan = sft.plan()
    assert {n: m["conversations"] for n, m in plan["mixture"].items()} == {"math_add2": 10, "domain_qa": 3,
                                                                            "chitchat": 40}
    assert all(m["tokens"] > 0 for m in plan["mixture"].values())
    assert plan["train_conversations"] + plan["heldout_conversations"] + plan["dropped_too_long"] == 53
    assert "chitchat 40" in sft.summary()


FR_BODY = ("Cette section explique en détail la marche à suivre, étape par étape, pour que le système fonctionne "
           "sans problème dans la plupart des cas.")


def test_the_sft_sources_and_the_scored_pairs_are_in_the_corpus_language(tmp_path):
    """French documents give French questions and French chat turns; a language whose pack has
    no qa.toml / chat.toml (de) leaves them out, and a post-training stage with nothing left
    to train on says which files to add before anything is launched."""
    from model.post.config import SFTConfig
    from stages.data.decontamination import eval_pairs
    from stages.training.post_train import nothing_to_train, sft_sources

    docs = [(f"f{i}", "val" if i % 3 == 0 else "train",
             _doc(f"Manuel {i}", f"Configurer le service numéro {i}", f"{FR_BODY} Variante {i}.")) for i in range(9)]
    store = _home(tmp_path, {"a": docs})
    shards = [str(store.dir("token_shards", "a"))]
    cfg = SFTConfig(domain_qa=3, chitchat=5, examples=10)
    fr = sft_sources(store, cfg, shards, "fr")
    assert len(fr["domain_qa"]) == 3 and len(fr["chitchat"]) == 5
    assert all("configurer le service" in p["messages"][0]["content"] for p in fr["domain_qa"])
    assert fr["chitchat"][0]["messages"][0]["content"] == "Bonjour"
    assert sft_sources(store, cfg, shards, "de") == {}
    assert eval_pairs(store, "de") == [] and eval_pairs(store, "fr")
    assert all("?" in p["messages"][0]["content"] or p["messages"][0]["content"].endswith(".")
               for p in eval_pairs(store, "fr"))
    assert nothing_to_train("sft", "fr", "", {}, None) is None  # the built-in math set
    why = nothing_to_train("sft", "de", "", {}, None)
    assert "post.sft has nothing to train on: language de has no chat.toml, math.toml, qa.toml" in why
    assert nothing_to_train("sft", "de", "/mine.jsonl", {}, None) is None
    assert "add pipelines/languages/de/math.toml" in nothing_to_train("dpo", "de", "", {}, None)
    assert nothing_to_train("dpo", "de", "/mine.jsonl", {}, None) is None
    assert "add pipelines/languages/de/math.toml" in nothing_to_train("grpo", "de", "/gsm8k.jsonl", {}, None)
    assert nothing_to_train("sft", "de", "", {"x": [{}]}, None) is None  # the corpus' pairs or chat turns


def test_evaluation_asks_math_in_the_corpus_language(tmp_path):
    pytest.importorskip("torch")
    from model.checkpoint.load import load
    from model.core.config import EvalConfig
    from model.infer.evaluate import evaluate_loaded
    from tests.support.factory import tiny_checkpoint

    loaded = load(tiny_checkpoint(tmp_path))
    cfg = EvalConfig(math_problems=2, sample_tokens=4, math_max_new_tokens=4, val_batches=1, prompts=("Hola",))
    fr = evaluate_loaded(loaded, cfg, language="fr")
    assert set(fr["math"]) == {"fr_add2", "fr_add2_rephrased"} and fr["math_set"] == "fr_add2"
    assert fr["math_problems"] == 2 and "left_out" not in fr
    es = evaluate_loaded(loaded, cfg)
    assert set(es["math"]) == {"es_add2", "es_add2_rephrased"}
    de = evaluate_loaded(loaded, cfg, language="de")
    assert de["math"] == {} and de["math_accuracy"] is None and de["math_set"] is None
    assert de["left_out"].startswith("language de has no math.toml: math word problems are left out; add "
                                     "pipelines/languages/de/math.toml")


def test_eval_contamination_looks_up_the_sets_of_the_corpus_language(tmp_path):
    from stages.config import preset
    from stages.data.decontamination import contamination_key, eval_sets

    docs = [(f"f{i}", "val" if i % 3 == 0 else "train",
             _doc(f"Manuel {i}", f"Configurer le service numéro {i}", f"{FR_BODY} Variante {i}.")) for i in range(9)]
    store = _home(tmp_path, {"a": docs})
    fr, de = preset("tiny", {"language": "fr"}), preset("tiny", {"language": "de"})
    sets, pairs = eval_sets(store, ["a"], fr)
    assert {"fr_add2", "fr_add2_rephrased", "domain_qa"} <= set(sets) and len(pairs) == 3
    assert all(i.item_id.startswith("fr:") for i in sets["fr_add2"])
    sets, pairs = eval_sets(store, ["a"], de)  # no math.toml, no qa.toml: no math sets, no pairs
    assert set(sets) == {"domain_qa"} and sets["domain_qa"] == [] and pairs == []
    assert contamination_key(fr, {"a": "v"}) != contamination_key(de, {"a": "v"})
