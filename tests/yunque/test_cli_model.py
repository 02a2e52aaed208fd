"""`yunque generate | chat | eval | export` as a user runs them: real subprocesses on a
small checkpoint."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.cli import yunque
from tests.support.factory import record_base, tiny_checkpoint


def _chats_apart(ckpt) -> bool:
    """Are this random model's greedy chat replies text without newlines (the chat test
    reads one reply per line), the second depending on the first exchange?"""
    from model.checkpoint.load import load
    from model.core.generate import Sampling, generate

    loaded = load(ckpt)
    tok, s = loaded.tokenizer, Sampling(8, stop=loaded.tokenizer.stop_ids)

    def reply(history: list[dict]) -> str:
        return tok.decode(generate(loaded.model, [tok.encode_chat(history)], s, pad_id=tok.eot_id)[0])

    first = reply([{"role": "user", "content": "hola"}])
    second = reply([{"role": "user", "content": "hola"}, {"role": "assistant", "content": first},
                    {"role": "user", "content": "¿y qué más?"}])
    alone = reply([{"role": "user", "content": "¿y qué más?"}])
    return all(r.strip() and "\n" not in r and "\ufffd" not in r for r in (first, second)) and second != alone


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    # the first seed whose random model chats as the tests need (_chats_apart): which one it
    # is changes with the tokenizer's vocabulary; <home>/data/base_model/step-00000010,
    # recorded as materialized
    for seed in range(1, 40):
        ckpt = tiny_checkpoint(tmp_path_factory.mktemp(f"cli{seed}") / "data", seed=seed)
        if _chats_apart(ckpt):
            break
    else:
        raise AssertionError("no seed in 1..39 gives a random model that chats in text")
    record_base(ckpt)
    return ckpt


def test_generate_prints_only_the_continuation(ckpt):
    from model.checkpoint.load import load
    from model.core.generate import Sampling, generate

    p = yunque("generate", "--checkpoint", str(ckpt), "--prompt", "La casa del", "--max-new-tokens", "10",
               "--temperature", "0")
    assert p.returncode == 0, p.stderr
    loaded = load(ckpt)
    tok = loaded.tokenizer
    ids = generate(loaded.model, [tok.encode("La casa del")], Sampling(10, stop=tok.stop_ids), pad_id=tok.eot_id)[0]
    assert p.stdout == tok.decode(ids) + "\n"
    # the asset directory resolves to its latest checkpoint
    again = yunque("generate", "--checkpoint", str(ckpt.parent), "--prompt", "La casa del", "--max-new-tokens", "10",
                   "--temperature", "0")
    assert again.stdout == p.stdout
    # int8 weights: runs, and says something of the same length budget
    q = yunque("generate", "--checkpoint", str(ckpt), "--prompt", "La casa del", "--max-new-tokens", "10", "--int8")
    assert q.returncode == 0 and q.stdout.strip(), q.stderr


def test_chat_streams_keeps_history_and_resets(ckpt):
    from model.checkpoint.load import load
    from model.core.generate import Sampling, generate

    turns = ["hola", "¿y qué más?", "/reset", "hola", "/exit"]
    p = yunque("chat", "--checkpoint", str(ckpt), "--max-new-tokens", "8", "--temperature", "0",
               stdin="\n".join(turns) + "\n")
    assert p.returncode == 0, p.stderr
    assert "chatting with" in p.stderr
    # what the model says to the whole conversation so far, greedy: the reply after the
    # second turn saw the first exchange, and /reset starts over
    loaded = load(ckpt)
    tok, s = loaded.tokenizer, Sampling(8, stop=loaded.tokenizer.stop_ids)
    history: list[dict] = []
    replies = []
    for turn in ["hola", "¿y qué más?"]:
        history.append({"role": "user", "content": turn})
        out = tok.decode(generate(loaded.model, [tok.encode_chat(history)], s, pad_id=tok.eot_id)[0])
        replies.append(out)
        history.append({"role": "assistant", "content": out})
    alone = tok.decode(generate(loaded.model, [tok.encode_chat(history[-2:-1])], s, pad_id=tok.eot_id)[0])
    assert alone != replies[1]  # so the equality below shows the history was used
    # each reply follows the "> " prompt printed before it; /reset prints none, and the reply
    # after it is the first one again (a random model's reply may hold newlines: compared whole)
    assert p.stdout == f"> {replies[0]}\n> {replies[1]}\n> > {replies[0]}\n> "


def test_missing_and_incompatible_checkpoints_are_clear_errors(tmp_path, ckpt):
    p = yunque("chat", "--checkpoint", str(tmp_path / "nope"))
    assert p.returncode == 1 and "does not exist" in p.stderr
    # a model of another vocabulary beside this tokenizer: not from the same run
    from model.checkpoint import state as ck
    from model.checkpoint.load import model_config
    from model.core.gpt import GPT

    cfg = dataclasses.replace(model_config(ck.latest(ckpt)), vocab_size=300)
    bad = ck.save(tmp_path / "other", 1, GPT(cfg).state_dict(), {}, {"model_config": dataclasses.asdict(cfg)},
                  tied=cfg.tie_embeddings, tokenizer=ckpt / "tokenizer")
    p = yunque("generate", "--checkpoint", str(bad.path), "--prompt", "hola")
    assert p.returncode == 1 and "not from the same run" in p.stderr, p.stderr


def test_eval_json_with_a_gsm8k_file(ckpt, tmp_path):
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text("\n".join(json.dumps({"question": f"¿Cuánto es {a} + {a}?", "answer": f"{a}+{a}=<<{a}+{a}="
                                          f"{2 * a}>>{2 * a}\n#### {2 * a}"}) for a in range(10, 16)) + "\n")
    p = yunque("eval", "--checkpoint", str(ckpt), "--gsm8k", str(gsm), "--problems", "4", "--json")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)
    assert row["math_set"] == "gsm8k" and row["math_problems"] == 6 and 0 <= row["math_accuracy"] <= 1
    assert row["math"]["es_add2"]["problems"] == 4 and len(row["samples"]) == 5
    gsm.write_text('{"question": "x", "answer": "no marker"}\n')
    p = yunque("eval", "--checkpoint", str(ckpt), "--gsm8k", str(gsm), "--problems", "2")
    assert p.returncode == 2 and f"{gsm}:1" in p.stderr and "####" in p.stderr


def test_export_writes_a_directory_transformers_loads(ckpt, tmp_path):
    out = tmp_path / "hf"
    p = yunque("export", "--checkpoint", str(ckpt), "--out", str(out), "--gguf", "--gguf-types", "q8_0")
    assert p.returncode == 0, p.stderr
    assert {f.name for f in out.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json", "model-q8_0.gguf", "yunque_export.json"}
    assert "from_pretrained" in p.stdout and "model-q8_0.gguf" in p.stdout
    # a recorded checkpoint's lineage travels with the export
    p = yunque("lineage", str(out), "--json")
    assert p.returncode == 0, p.stderr
    view = json.loads(p.stdout)
    record = json.loads((ckpt.parent / "materialized.json").read_text())
    assert [(e["asset"], e["weights_sha256"]) for e in view["chain"]] == [("base_model", record["weights_sha256"])]
    assert view["data"]["tokenizer_hash"] == record["inputs"]["tokenizer_hash"]
    p = yunque("export", "--checkpoint", str(ckpt), "--out", str(out), "--gguf", "--gguf-types", "q3")
    assert p.returncode == 1 and "unknown GGUF type" in p.stderr
