"""Which data outputs are up to date, asked before anything runs.

Each data stage is memoised on a key of its code version, the configuration it uses and
its input's key (`stages.data.ingest`, `stages.data.dedup`, `stages.data.token_shards`, the same key
functions the stages call). Those keys chain: a shard's raw_documents key comes from its
files as listed, its clean_documents key from that, and so on. So the key each output
would have now is known without running anything, and an output whose committed key is
that one has nothing to do. An output downstream of one that must run must run too
(its key is not known until then: deduped_documents depends on what the index decides).

`yunque run` asks this before it submits a backfill, and leaves up-to-date partitions
out of it: a selection that is up to date starts no run at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stages.asset_names import (
    CLEAN_DOCUMENTS,
    DEDUP_INDEX,
    DEDUPED_DOCUMENTS,
    EVAL_CONTAMINATION,
    FILTERED_DOCUMENTS,
    HUMAN_PREFERENCES,
    MINHASH_SIGNATURES,
    QUALITY_MODEL,
    RAW_DOCUMENTS,
    TOKEN_SHARDS,
    TOKENIZER,
)
from stages.config import YunqueConfig
from stages.data import human_preferences
from stages.data import quality as quality_model
from stages.data.decontamination import contamination_key
from stages.data.dedup import deduped_key, index_key, minhash_key
from stages.data.ingest import clean_key, filter_key, read_key
from stages.data.token_shards import encoded_key, intact
from stages.data.tokenizer import tokenizer_key
from stages.store.integrity import DamagedOutput
from stages.store.outputs import MANIFEST, DataStore

PER_SHARD = (RAW_DOCUMENTS, CLEAN_DOCUMENTS, FILTERED_DOCUMENTS, MINHASH_SIGNATURES, DEDUPED_DOCUMENTS, TOKEN_SHARDS)
# the unpartitioned data assets; human_preferences reads the chat page's ratings, not the corpus
WHOLE_CORPUS = (DEDUP_INDEX, QUALITY_MODEL, TOKENIZER, EVAL_CONTAMINATION, HUMAN_PREFERENCES)


def in_store(store: DataStore, asset: str, shard: str | None = None) -> bool:
    """Whether the store holds `asset`'s output (of `shard`): its manifest, or for
    human_preferences, which is not a cached stage, the summary it writes last."""
    done = human_preferences.SUMMARY_FILE if asset == HUMAN_PREFERENCES else MANIFEST
    return (store.dir(asset, shard) / done).exists()


@dataclass
class DataPlan:
    """What is up to date: per-shard assets with their current shards, and whole-corpus
    assets. Everything else in a selection has work to do."""

    fresh_shards: dict[str, set[str]] = field(default_factory=dict)
    fresh_assets: set[str] = field(default_factory=set)
    # outputs whose files no longer match their manifest ("asset/shard" or "asset" -> why):
    # never up to date, so the run rebuilds them, and everything downstream with them
    damaged: dict[str, str] = field(default_factory=dict)

    def is_fresh(self, asset: str, shard: str | None = None) -> bool:
        return asset in self.fresh_assets if shard is None else shard in self.fresh_shards.get(asset, set())


def _manifest(store: DataStore, asset: str, shard: str | None, out: DataPlan) -> dict | None:
    """The committed manifest, or None; a version damaged in the object store (its pull
    failed its checksums) is recorded as damaged and counts as absent."""
    try:
        return store.manifest(asset, shard)
    except DamagedOutput as e:
        out.damaged[f"{asset}/{shard}" if shard else asset] = f"{e.file}: {e.why}"
        return None


def _current(store: DataStore, asset: str, shard: str | None, key: str | None, out: DataPlan) -> bool:
    if key is None:
        return False
    where = f"{asset}/{shard}" if shard else asset
    m = _manifest(store, asset, shard, out)
    if m is None or m.get("key") != key:
        return False
    if why := store.damage(asset, shard, m):
        out.damaged[where] = why
        return False
    return True


def plan(store: DataStore, cfg: YunqueConfig, fingerprints: Mapping[str, str]) -> DataPlan:
    """The up-to-date data outputs of a corpus whose shards, as listed now, have these
    fingerprints (shard -> fingerprint); all of them take part in the index."""
    out = DataPlan(fresh_shards={a: set() for a in PER_SHARD})
    filtered: dict[str, str | None] = {}
    signatures: dict[str, str | None] = {}
    for shard, fingerprint in fingerprints.items():
        key: str | None = read_key(cfg, fingerprint)
        for asset, next_key in (("raw_documents", lambda k: clean_key(cfg, k)),
                                ("clean_documents", lambda k: filter_key(cfg, k)),
                                ("filtered_documents", lambda k: minhash_key(cfg, k)),
                                ("minhash_signatures", None)):
            if not _current(store, asset, shard, key, out):
                key = None
            else:
                out.fresh_shards[asset].add(shard)
            if asset == "filtered_documents":
                filtered[shard] = key
            if asset == "minhash_signatures":
                signatures[shard] = key
            elif key is not None:
                key = next_key(key)
    index_fresh = all(k is not None for k in signatures.values()) and _current(
        store, DEDUP_INDEX, None, index_key(cfg, {s: k for s, k in signatures.items() if k is not None}), out)
    if index_fresh:
        out.fresh_assets.add(DEDUP_INDEX)
    digests = (_manifest(store, DEDUP_INDEX, None, out) or {}).get("stats", {}).get("extra", {}).get(
        "shard_digests", {})
    scored = None
    if _manifest(store, QUALITY_MODEL, None, out) is not None:
        scored = quality_model.current_digests(store, cfg, filtered) if all(
            k is not None for k in filtered.values()) else None
        if scored is not None:
            out.fresh_assets.add(QUALITY_MODEL)
        elif why := store.damage(QUALITY_MODEL):
            out.damaged[QUALITY_MODEL] = why
    tok = _manifest(store, TOKENIZER, None, out)
    if not cfg.tokenizer.retrain and _current(store, TOKENIZER, None, tokenizer_key(cfg), out):
        out.fresh_assets.add(TOKENIZER)  # trained once: new shards do not retrain it
    for shard in fingerprints:
        if not (index_fresh and scored is not None and filtered[shard] is not None and shard in digests):
            continue
        deduped = deduped_key(cfg, filtered[shard], digests[shard], scored[shard])
        if not _current(store, DEDUPED_DOCUMENTS, shard, deduped, out):
            continue
        out.fresh_shards[DEDUPED_DOCUMENTS].add(shard)
        if TOKENIZER in out.fresh_assets and tok is not None:
            encoded = encoded_key(cfg, tok["stats"]["extra"]["tokenizer_hash"], deduped)
            if _current(store, TOKEN_SHARDS, shard, encoded, out) and intact(store.dir(TOKEN_SHARDS, shard)):
                out.fresh_shards[TOKEN_SHARDS].add(shard)
    if human_preferences.is_current(store):  # the same ratings: the same pairs and conversations
        out.fresh_assets.add(HUMAN_PREFERENCES)
    if fingerprints and out.fresh_shards[TOKEN_SHARDS] == set(fingerprints):
        # the shards base_model would train on (stages.training.pretrain.token_inputs: not the empty ones)
        versions = {s: m["key"] for s in fingerprints if (m := _manifest(store, TOKEN_SHARDS, s, out))
                    and (m["stats"]["extra"].get("train_tokens") or m["stats"]["extra"].get("val_tokens"))}
        if _current(store, EVAL_CONTAMINATION, None, contamination_key(cfg, versions), out):
            out.fresh_assets.add(EVAL_CONTAMINATION)
    return out
