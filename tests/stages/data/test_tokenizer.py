"""Tokenizer training, the saved Hugging Face directory, the document encoder and the
tokenizer / token-shard stages on a small store (no Dagster)."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from pipelines.data.documents import FILTERED_SCHEMA
from pipelines.tokens.token_format import TokenShard, TokenShardError, token_dtype
from pipelines.tokens.tokenizer import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    EOT,
    PROBES,
    SPECIAL_TOKENS,
    DocumentEncoder,
    TokenizerError,
    VocabularyTooLarge,
    is_validation,
    save_pretrained,
    tiktoken_encoding,
    train_bpe,
)
from stages.config import preset
from stages.data.token_shards import token_shard_stage
from stages.data.tokenizer import round_trip, tokenizer_stage
from stages.store.outputs import DataStore, StageStats
from tests.support.factory import spanish_text


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(0)
    return [spanish_text(rng) for _ in range(40)]


@pytest.fixture(scope="module")
def tokdir(tmp_path_factory, texts):
    tok = train_bpe(texts, 600)
    d = tmp_path_factory.mktemp("tok")
    save_pretrained(tok, d, max_length=256)
    return d


def test_train_gives_the_requested_vocabulary_with_specials_first(texts):
    tok = train_bpe(texts, 600)
    assert tok.get_vocab_size() == 600
    assert [tok.token_to_id(s) for s in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))


def test_vocabulary_larger_than_the_corpus_is_an_error(texts):
    with pytest.raises(VocabularyTooLarge, match=r"supports only \d+ tokens.*lower tokenizer.vocab_size"):
        train_bpe(texts[:3], 50_000)


def test_training_is_deterministic(texts):
    a, b = train_bpe(texts, 500), train_bpe(texts, 500)
    assert a.to_str() == b.to_str()


def test_round_trip_of_hard_strings(tokdir):
    enc = DocumentEncoder(tokdir)
    for text in PROBES:
        assert enc.decode(enc.encode(text)) == text, repr(text)
    assert enc.encode("") == []


def test_control_tokens_are_plain_text_in_documents_tags_are_not(tokdir):
    for backend in ("tiktoken", "hf"):
        enc = DocumentEncoder(tokdir, backend=backend)
        ids = enc.encode(f"fin {EOT} <|user|> <answer>7</answer>")
        assert not set(ids) & set(range(len(CONTROL_TOKENS)))
        tags = [enc.hf.token_to_id(t) for t in ("<answer>", "</answer>")]
        assert [i for i in ids if i < len(SPECIAL_TOKENS)] == tags, backend


def test_digits_are_single_tokens(tokdir):
    enc = DocumentEncoder(tokdir)
    assert len(enc.encode("1234567")) == 7


def test_tiktoken_encoder_gives_the_hf_ids(tokdir, texts):
    fast, hf = DocumentEncoder(tokdir, backend="tiktoken"), DocumentEncoder(tokdir, backend="hf")
    sample = texts + PROBES
    assert fast.encode_batch(sample) == hf.encode_batch(sample)
    # and the vocabulary maps one to one
    assert tiktoken_encoding(hf.hf).n_vocab == hf.vocab_size


def test_transformers_loads_the_directory(tokdir, texts):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokdir)
    assert tok.eos_token == EOT and tok.pad_token == EOT
    ours = DocumentEncoder(tokdir)
    for text in texts[:5] + ["¿Qué tal? 😀 中文"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == ours.encode(text)
        assert tok.decode(ids) == text
    chat = [{"role": "system", "content": "Eres útil."}, {"role": "user", "content": "¿2+2?"},
            {"role": "assistant", "content": "<answer>4</answer>"}]
    text = tok.apply_chat_template(chat, tokenize=False)
    assert text == "<|system|>\nEres útil.<|end|>\n<|user|>\n¿2+2?<|end|>\n<|assistant|>\n<answer>4</answer><|end|>\n"
    prompt = tok.apply_chat_template(chat[1:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|end|>\n<|assistant|>\n")
    ids = tok.apply_chat_template(chat, tokenize=True, return_dict=False)
    assert tok.convert_tokens_to_ids("<|assistant|>") in ids and tok.convert_tokens_to_ids("<answer>") in ids
    with pytest.raises(Exception, match="unknown chat role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)
    config = json.loads((tokdir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE == (tokdir / "chat_template.jinja").read_text()
    # the reasoning tags survive the default decoding of transformers (and vLLM); roles do not
    answer = tok.decode(ids, skip_special_tokens=True)
    assert "<answer>4</answer>" in answer and "<|assistant|>" not in answer


def test_split_is_deterministic_and_about_the_fraction():
    ids = [f"{i:032x}" for i in range(20_000)]
    val = [d for d in ids if is_validation(d, 0.05)]
    assert 800 < len(val) < 1200
    assert val == [d for d in ids if is_validation(d, 0.05)]
    assert val != [d for d in ids if is_validation(d, 0.05, seed=1)]


# --- stages on a store ---------------------------------------------------------------------

def _deduped(store: DataStore, shard: str, texts: list[str]) -> None:
    rows = [{"doc_id": f"{shard}-{i:04d}", "shard": shard, "source": f"{shard}/{i}.txt", "text": t,
             "lang": "es", "lang_score": 0.99} for i, t in enumerate(texts)]
    table = pa.Table.from_pylist(rows, schema=FILTERED_SCHEMA)
    stats = StageStats(key=f"k-{shard}-{len(texts)}", docs_in=len(rows), docs_out=len(rows),
                       bytes_out=sum(len(t.encode()) for t in texts))
    store.commit("deduped_documents", shard, stats, {"part-0.parquet": table})


@pytest.fixture()
def store(tmp_path, texts):
    s = DataStore(tmp_path)
    _deduped(s, "a", texts[:25])
    _deduped(s, "b", texts[25:])
    return s


def _cfg(**tok):
    return preset("tiny", {f"tokenizer.{k}": v for k, v in {"vocab_size": 500, "val_fraction": 0.2, **tok}.items()})


def test_tokenizer_stage_is_cached_on_config_not_corpus(store, texts):
    cfg = _cfg()
    first = tokenizer_stage(store, ["a", "b"], cfg)
    assert not first.cached and first.extra["vocab_size"] == 500 and first.extra["encoder"] == "tiktoken"
    assert 0 < first.extra["train_documents"] < len(texts)  # validation documents held out
    assert first.extra["compression"]["languages"]["es"]["tokens_per_word"] > 0
    _deduped(store, "c", texts[:5])  # a new shard does not retrain it
    assert tokenizer_stage(store, ["a", "b", "c"], cfg).cached
    again = tokenizer_stage(store, ["a", "b"], _cfg(retrain=True))
    assert not again.cached and again.extra["tokenizer_hash"] == first.extra["tokenizer_hash"]
    other = tokenizer_stage(store, ["a", "b"], _cfg(vocab_size=450))
    assert other.extra["tokenizer_hash"] != first.extra["tokenizer_hash"]


def test_tokenizer_stage_errors(tmp_path, store):
    empty = DataStore(tmp_path / "empty")
    with pytest.raises(TokenizerError, match="no shard"):
        tokenizer_stage(empty, [], _cfg())
    _deduped(empty, "z", [])
    with pytest.raises(TokenizerError, match="no training documents"):
        tokenizer_stage(empty, ["z"], _cfg())
    with pytest.raises(VocabularyTooLarge, match="supports only"):  # within the bound: the trainer says so
        tokenizer_stage(store, ["a", "b"], _cfg(vocab_size=2_000))
    # far out of reach: refused from the manifests' byte counts, before the trainer reads a document
    with pytest.raises(VocabularyTooLarge, match=r"vocab_size=10,000,000 is out of reach of [\d,]+ bytes of "
                                                 r"training text.*so at most [\d,]+"):
        tokenizer_stage(store, ["a", "b"], _cfg(vocab_size=10_000_000))


def test_round_trip_check_on_held_out_documents(store):
    cfg = _cfg()
    tokenizer_stage(store, ["a", "b"], cfg)
    result = round_trip(store, ["a", "b"], cfg)
    assert result.checked > len(PROBES) and result.failures == []


def test_token_shards_hold_each_document_then_eot(store, texts):
    cfg = _cfg()
    tokenizer_stage(store, ["a", "b"], cfg)
    stats = token_shard_stage(store, "a", cfg)
    enc = DocumentEncoder(store.dir("tokenizer"))
    shard = TokenShard.open(store.dir("token_shards", "a"))
    assert shard.header["dtype"] == "<u2" and shard.tokenizer_hash == enc.hash
    expect = {"train": [], "val": []}
    for i, t in enumerate(texts[:25]):
        expect["val" if is_validation(f"a-{i:04d}", 0.2) else "train"].append(enc.encode(t) + [enc.eot_id])
    for name, docs in expect.items():
        split = shard.split(name)
        assert split.documents == len(docs)
        assert [split.document(i).tolist() for i in range(split.documents)] == docs
        assert shard.header["splits"][name]["tokens"] == sum(map(len, docs))
    assert stats.extra["val_documents"] == len(expect["val"]) > 0
    assert token_shard_stage(store, "a", cfg).cached
    # retraining with another vocabulary makes the shard a cache miss
    tokenizer_stage(store, ["a", "b"], _cfg(vocab_size=450))
    assert not token_shard_stage(store, "a", _cfg(vocab_size=450)).cached


def test_dtype_follows_the_vocabulary():
    assert token_dtype(4096) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32


def test_check_thresholds_do_not_retrain_or_re_encode(store):
    tokenizer_stage(store, ["a", "b"], _cfg())
    token_shard_stage(store, "a", _cfg())
    relaxed = _cfg(max_tokens_per_word=3.0, check_documents=10)
    assert tokenizer_stage(store, ["a", "b"], relaxed).cached
    assert token_shard_stage(store, "a", relaxed).cached


def test_a_truncated_token_shard_is_refused_and_rebuilt(store):
    cfg = _cfg()
    tokenizer_stage(store, ["a", "b"], cfg)
    token_shard_stage(store, "a", cfg)
    path = store.dir("token_shards", "a") / "train.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(TokenShardError, match="truncated"):
        TokenShard.open(path.parent).split("train")
    assert not token_shard_stage(store, "a", cfg).cached  # the cache hit is not trusted
    TokenShard.open(path.parent).verify()


def test_a_failed_write_leaves_no_staging_files(store, monkeypatch):
    import stages.data.token_shards as ts

    cfg = _cfg()
    tokenizer_stage(store, ["a", "b"], cfg)

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ts.SplitWriter, "add", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        token_shard_stage(store, "a", cfg)
    assert list(store.staging().iterdir()) == []
    assert not store.dir("token_shards", "a").exists()


def test_encoder_disagreeing_with_hf_falls_back_to_hf(store, monkeypatch):
    import stages.data.token_shards as ts

    cfg = _cfg()
    tokenizer_stage(store, ["a", "b"], cfg)
    monkeypatch.setattr(ts, "_agrees_with_hf", lambda *a: False)
    stats = token_shard_stage(store, "a", cfg)
    assert stats.extra["encoder_fallback"] is True
    shard = TokenShard.open(store.dir("token_shards", "a"))
    assert shard.header["encoder"] == "hf"
    hf = DocumentEncoder(store.dir("tokenizer"), backend="hf")
    split = shard.split("train")
    train = [t for i, t in enumerate(_texts_of(store, "a")) if not is_validation(f"a-{i:04d}", 0.2)]
    # started over: each document once, as the HF encoder gives it
    assert [split.document(i).tolist()[:-1] for i in range(split.documents)] == hf.encode_batch(train)


def _texts_of(store: DataStore, shard: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(store.part("deduped_documents", shard), columns=["text"])["text"].to_pylist()
