"""Question-answer pairs from a home's kept documents (no torch, no Dagster), split as
the training run splits them, so that a held-out answer is text the model never trained on.

`train_pairs(store)` gives SFT records (pipelines.tasks.domain_qa) from the token shards'
train documents; `heldout_pairs(store, limit)` the same from their validation documents,
minus any answer also among the training pairs, a deterministic sample of at most
`limit`. A document no token shard lists is in neither; a language whose pack has no
qa.toml has no pairs. docs/post-training.md#instruction-data-from-your-documents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import pyarrow.parquet as pq

from pipelines.tasks import packs
from pipelines.tasks.domain_qa import QAOptions, build_pairs
from stages.asset_names import DEDUPED_DOCUMENTS, TOKEN_SHARDS
from stages.store.keys import cache_key
from stages.store.outputs import MANIFEST, READ_BATCH, DataStore

DOCUMENTS = DEDUPED_DOCUMENTS
SPLITS_FILE = "documents.parquet"
DEFAULT = QAOptions()
SCORED_PAIRS = 64  # held-out pairs eval_report scores per checkpoint (a few seconds on a CPU for a small model)
# candidates eval_contamination looks up in the training split: the first SCORED_PAIRS
# that share no n-gram with it are the ones scored
CANDIDATE_PAIRS = 4 * SCORED_PAIRS


def encoded_shards(store: DataStore) -> list[str]:
    """Shards whose token shards (and so whose train/validation split) exist."""
    root = store.dir(TOKEN_SHARDS)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).exists() and (p / SPLITS_FILE).exists())


def document_splits(store: DataStore, shard: str) -> dict[str, str]:
    """{doc_id: "train" | "val"} as the shard's token shards split it."""
    t = pq.read_table(store.verified(TOKEN_SHARDS, shard) / SPLITS_FILE, columns=["doc_id", "split"])
    return dict(zip(t.column("doc_id").to_pylist(), t.column("split").to_pylist(), strict=True))


def documents(store: DataStore, split: str, shards: Sequence[str] | None = None) -> Iterator[dict]:
    """The kept documents ({doc_id, shard, text}) of one split, shard by shard."""
    for shard in sorted(shards if shards is not None else encoded_shards(store)):
        splits = document_splits(store, shard)
        part = store.part(DOCUMENTS, shard)
        if not part.exists():
            continue
        for batch in pq.ParquetFile(part).iter_batches(batch_size=READ_BATCH, columns=["doc_id", "text"]):
            for d in batch.to_pylist():
                if splits.get(d["doc_id"]) == split:
                    yield {"doc_id": d["doc_id"], "shard": shard, "text": d["text"]}


def train_pairs(store: DataStore, shards: Sequence[str] | None = None, opts: QAOptions = DEFAULT,
                language: str = "es") -> list[dict]:
    if not packs.has(language, packs.QA):
        return []
    return build_pairs(documents(store, "train", shards), opts, language)


def _answer(p: dict) -> str:
    return " ".join(p["messages"][-1]["content"].lower().split())


def order_key(p: dict) -> str:
    """A pair's place in a deterministic sample spread over shards and documents."""
    return hashlib.sha256(f"{p['doc_id']}\x1f{p['heading']}".encode()).hexdigest()


def heldout_pairs(store: DataStore, limit: int | None = None, shards: Sequence[str] | None = None,
                  opts: QAOptions = DEFAULT, train: list[dict] | None = None, language: str = "es") -> list[dict]:
    """Pairs from validation documents whose answer is not also a training answer; with
    `limit`, a sample spread over shards and documents (ordered by a hash, not by shard)."""
    if not packs.has(language, packs.QA):
        return []
    seen = {_answer(p) for p in (train if train is not None else train_pairs(store, shards, opts, language))}
    pairs = [p for p in build_pairs(documents(store, "val", shards), opts, language) if _answer(p) not in seen]
    pairs.sort(key=order_key)
    return pairs[:limit] if limit is not None else pairs


def pairs_key(pairs: Sequence[dict]) -> str:
    """What an evaluation of the pairs depends on: their questions and answers."""
    return cache_key([[m["content"] for m in p["messages"]] for p in pairs])


