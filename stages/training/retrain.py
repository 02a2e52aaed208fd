"""Is there data the base model has not seen? The question the training schedule asks
before it starts anything: token shards (encoded with the current tokenizer, of shards
still in the corpus) whose versions are not among those the recorded base model consumed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from stages.asset_names import BASE_MODEL, TOKEN_SHARDS, TOKENIZER
from stages.store.outputs import DataStore

BASE_RECORD = (BASE_MODEL, "materialized.json")


@dataclass
class Unseen:
    shards: dict[str, str] = field(default_factory=dict)  # shard -> token_shards version not trained on
    seen: int = 0  # ready shards the base model has trained on at their current version
    reason: str = ""

    @property
    def any(self) -> bool:
        return bool(self.shards)


def trained_versions(store: DataStore) -> dict[str, str] | None:
    """{shard: version} of the token shards the materialized base model consumed, or None
    when no base model has been materialized (a run that never finished does not count)."""
    path = store.dir(BASE_RECORD[0]) / BASE_RECORD[1]
    if not path.exists():
        return None
    return dict(json.loads(path.read_text())["inputs"]["token_shards"])  # stages.training.lineage.record_materialized


def unseen_shards(store: DataStore, ready: list[str]) -> Unseen:
    tok = store.manifest(TOKENIZER)
    if tok is None:
        return Unseen(reason="no tokenizer yet")
    current = tok["stats"]["extra"]["tokenizer_hash"]
    encoded = {}
    for shard in ready:
        m = store.manifest(TOKEN_SHARDS, shard)
        extra = m["stats"]["extra"] if m is not None else {}
        # as stages.training.pretrain.token_inputs: a shard without tokens is nobody's input
        if extra.get("tokenizer_hash") == current and (extra.get("train_tokens") or extra.get("val_tokens")):
            encoded[shard] = m["key"]
    if not encoded:
        return Unseen(reason="no token shards encoded with the current tokenizer")
    trained = trained_versions(store)
    if trained is None:
        return Unseen(shards=encoded, reason="no base model yet")
    new = {s: v for s, v in encoded.items() if trained.get(s) != v}
    return Unseen(shards=new, seen=len(encoded) - len(new),
                  reason=f"{len(new)} shard(s) not seen by the base model" if new else
                  f"the base model has seen all {len(encoded)} encoded shards")
