"""Post-training data: the readers' errors, the built-in sets' split, and the loss mask."""

import json

import pytest

from model.core.batches import IGNORE, Epochs, collate, encode_conversation, encode_reply, fit
from model.core.chat import ChatTokenizer
from model.post.sft import mask_check
from pipelines.tasks import math_tasks
from pipelines.tasks.math_answers import extract_answer, has_reasoning_format, is_correct
from pipelines.tasks.post_data import (
    PostDataError,
    math_preferences,
    math_sft,
    read_preferences,
    read_sft,
    split_heldout,
)
from tests.support.factory import tokenizer_dir


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return ChatTokenizer(tokenizer_dir(tmp_path_factory.mktemp("tok")))


def _jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


CONV = [{"role": "system", "content": "Eres útil."}, {"role": "user", "content": "¿12 + 34?"},
        {"role": "assistant", "content": "<think>12 + 34 = 46.</think><answer>46</answer>"},
        {"role": "user", "content": "¿Y 7 por 8?"}, {"role": "assistant", "content": "56"}]


def test_read_sft_and_errors_name_the_line(tmp_path):
    good = _jsonl(tmp_path / "ok.jsonl", [{"messages": CONV}, "", {"messages": CONV[:3]}])
    assert read_sft(good) == [CONV, CONV[:3]]
    cases = [("not json", "invalid JSON"), ([1], "not a JSON object"), ({"messages": []}, "non-empty list"),
             ({"messages": [{"role": "bot", "content": "x"}]}, "role 'bot'"),
             ({"messages": [{"role": "user"}]}, "no string 'content'"),
             ({"messages": [{"role": "user", "content": "hola"}]}, "no assistant message")]
    for i, (bad, reason) in enumerate(cases):
        path = _jsonl(tmp_path / f"bad{i}.jsonl", [{"messages": CONV}, bad if isinstance(bad, str) else
                                                    json.dumps(bad)])
        with pytest.raises(PostDataError, match=rf"bad{i}\.jsonl:2: .*{reason}"):
            read_sft(path)
    with pytest.raises(PostDataError, match="no such file"):
        read_sft(tmp_path / "missing.jsonl")


def test_read_preferences_in_both_conventions(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [
        {"prompt": "¿2 + 2?", "chosen": "4", "rejected": "5"},
        {"prompt": [{"role": "user", "content": "¿3 + 3?"}],
         "chosen": [{"role": "user", "content": "¿3 + 3?"}, {"role": "assistant", "content": "6"}],
         "rejected": [{"role": "assistant", "content": "7"}]}])
    pairs = read_preferences(path)
    assert [(p.prompt[-1]["content"], p.chosen, p.rejected) for p in pairs] == [("¿2 + 2?", "4", "5"),
                                                                                ("¿3 + 3?", "6", "7")]
    for i, (bad, reason) in enumerate([({"prompt": "x", "chosen": "a"}, "missing field 'rejected'"),
                                       ({"prompt": "x", "chosen": "a", "rejected": "a"}, "the same reply"),
                                       ({"prompt": "x", "chosen": [{"role": "user", "content": "a"}],
                                         "rejected": "b"}, "last message must be the assistant")]):
        with pytest.raises(PostDataError, match=rf"b{i}\.jsonl:1: .*{reason}"):
            read_preferences(_jsonl(tmp_path / f"b{i}.jsonl", [bad]))


def test_builtin_sets_use_training_operands_only():
    heldout = {tuple(sorted(p.id.split(":")[1].split("+"))) for p in math_tasks.math_eval_set("es_add2", 1257)}
    for conv in math_sft(500, "add2", 0):
        words = conv[0]["content"].replace("?", " ").replace(".", " ").split()
        a, b = [w for w in words if w.isdigit()][:2]
        assert tuple(sorted((a, b))) not in heldout
        assert has_reasoning_format(conv[-1]["content"])
    pairs = math_preferences(300, "add2", 0)
    assert {p.kind for p in pairs} == {"wrong_step", "wrong_answer", "no_answer_tags", "unfinished"}
    for p in pairs:
        answer = extract_answer(p.chosen)
        assert has_reasoning_format(p.chosen)
        if p.kind in ("wrong_step", "wrong_answer"):  # well formed, wrong result
            assert not is_correct(extract_answer(p.rejected), answer)
        else:
            assert not has_reasoning_format(p.rejected)


def test_split_heldout_is_a_seeded_partition():
    train, held = split_heldout(list(range(100)), 0.1, seed=3)
    assert len(held) == 10 and sorted(train + held) == list(range(100))
    assert split_heldout(list(range(100)), 0.1, seed=3) == (train, held)
    assert split_heldout([1], 0.5, 0) == ([1], [])


def test_loss_mask_covers_assistant_replies_and_their_end_only(tok):
    row = encode_conversation(tok, CONV)
    assert row.ids == tok.encode_chat(CONV, add_generation_prompt=False)  # the chat template, exactly
    check = mask_check(tok, CONV, row)
    assert check["passed"], check
    assert check["trained_text"] == ("<think>12 + 34 = 46.</think><answer>46</answer><|end|>56<|end|>")
    # no role header, system or user token is trained
    trained = {i for i, keep in zip(row.ids, row.trained) if keep}
    assert not trained & set(tok.role_ids.values())
    # collate shifts by one: the target of position t is id t+1, kept only where that id is trained
    b = collate([row, encode_conversation(tok, CONV[:3])], tok.eot_id)
    assert b.idx.shape == b.targets.shape == (2, len(row.ids) - 1)
    kept = [t for t in b.targets[0].tolist() if t != IGNORE]
    assert tok.decode(kept) == check["trained_text"]
    assert b.targets[1, len(encode_conversation(tok, CONV[:3]).ids) - 1:].eq(IGNORE).all()  # padding


def test_reply_rows_and_fit(tok):
    prompt = CONV[:2]
    row = encode_reply(tok, prompt, "46")
    assert row.ids == tok.encode_chat(prompt) + tok.encode("46") + [tok.end_id]
    assert tok.decode([i for i, k in zip(row.ids, row.trained) if k]) == "46<|end|>"
    kept, dropped = fit([row, encode_reply(tok, prompt, "46 " * 200)], max_len=64)
    assert kept == [row] and dropped == 1


def test_epochs_resume_exactly_and_shard_ranks():
    a = Epochs(10, 4, seed=1)
    first = [a.next() for _ in range(7)]
    b = Epochs(10, 4, seed=1)
    for _ in range(3):
        b.next()
    c = Epochs(10, 4, seed=1)
    c.load_state_dict(b.state_dict())
    assert [c.next() for _ in range(4)] == first[3:]
    assert sorted(i for batch in first[:5] for i in batch) == sorted(list(range(10)) * 2)  # two epochs
    r0, r1 = Epochs(10, 2, seed=1, rank=0, world=2), Epochs(10, 2, seed=1, rank=1, world=2)
    assert sorted(r0.next() + r1.next()) == sorted(Epochs(10, 4, seed=1).next())
