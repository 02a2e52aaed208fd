"""quality_model: the learned quality signal over the whole corpus (pipelines.data.quality).

It is trained once on the corpus as filtered, on redacted text only, then scores every
shard's filtered documents; deduped_documents drops a document scoring below the
threshold (`learned_quality:score`), so dedup, the tokenizer and the token arrays never
see it. It retrains when its settings, the rules or the language change, or when the
corpus holds more than twice the documents it was trained on; otherwise a new shard is
only scored and the other shards' outputs stay. docs/learned-quality.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from stages.asset_names import QUALITY_MODEL
from stages.config import YunqueConfig
from stages.store.keys import cache_key, stage_key, upstream_key
from stages.store.outputs import DataStore, StageStats, read_table

ASSET = QUALITY_MODEL
MODEL_FILE = "model.zip"
def scores_file(shard: str) -> str:
    """A shard's scores (doc_id, score), flat in the asset's directory: a home on an object
    store uploads and downloads a version's files, not folders."""
    return f"scores.{shard}.parquet"
GROWTH = 2.0  # retrain when the corpus holds more than this many times the documents trained on


class StaleQualityError(ValueError):
    """quality_model does not cover this shard's current filtered documents (yet)."""


def _model_config(cfg: YunqueConfig) -> str:
    """What a model depends on besides its sample: its settings, the filters (which decide
    positives and negatives), the language and the personal-data settings."""
    from stages.data.filter_profile import filters_key

    return stage_key(ASSET, cfg, ("pii",), filters_key(cfg.filters), cfg.language,
                     _good_examples_fingerprint(cfg.filters.learned.good_examples))


def _good_examples_fingerprint(path: str | None) -> str:
    if not path:
        return ""
    from pipelines.data.corpus import get_shard

    fs, root = _examples_root(path)
    return get_shard(fs, root, Path(path).name).fingerprint


def _examples_root(path: str):
    from pipelines.data.corpus import open_corpus

    parent = str(Path(path).resolve().parent)
    return open_corpus(parent)


def _read_good_examples(path: str, cfg: YunqueConfig) -> list[str]:
    """The user's good examples, read, cleaned and redacted as the corpus is."""
    from pipelines.data.corpus import get_shard
    from pipelines.data.extract import html_to_text, normalize_text
    from pipelines.data.readers.shard import read_shard
    from stages.data import personal_data

    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"filters.learned.good_examples: {path} is not a folder")
    fs, root = _examples_root(path)
    docs, _ = read_shard(fs, root, get_shard(fs, root, folder.name), cfg.reader)
    texts = [normalize_text(html_to_text(d.text, cfg.clean.extractor) if d.format == "html" else d.text,
                            cfg.clean.unicode_form, cfg.clean.fix_mojibake) for d in docs]
    return personal_data.redact([t for t in texts if t.strip()], cfg).texts


def _picked(doc_ids: Sequence[str], quota: int, seed: int) -> list[int]:
    """Up to `quota` rows, chosen by a hash of the doc_id: the same documents every time."""
    order = sorted(range(len(doc_ids)), key=lambda i: xxhash.xxh3_64_intdigest(f"{seed}:{doc_ids[i]}".encode()))
    return sorted(order[:quota])


def _sample(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> tuple[list[str], list[str], list[str]]:
    """(passed, rejected by a rule, other-language) texts, spread evenly over the shards."""
    lq = cfg.filters.learned
    quota = max(1, math.ceil(lq.sample_docs / max(1, len(shards))))
    passed: list[str] = []
    rejected: list[str] = []
    foreign: list[str] = []
    for shard in shards:
        kept = read_table(store.part("filtered_documents", shard), ["doc_id", "text"])
        ids = kept["doc_id"].to_pylist()
        texts = kept["text"].to_pylist()
        passed += [texts[i] for i in _picked(ids, quota, lq.seed)]
        path = store.rejected(shard, "filter")
        if path.exists():
            rej = pq.read_table(path, columns=["doc_id", "stage", "reason", "text"])
            rej = rej.filter(pc.is_valid(rej["text"]))
            by_rule = rej.filter(pc.equal(rej["stage"], "filter"))
            other = rej.filter(pc.equal(rej["reason"], "langid:other_language"))
            for table, out in ((by_rule, rejected), (other, foreign)):
                t_ids, t_texts = table["doc_id"].to_pylist(), table["text"].to_pylist()
                out += [t_texts[i] for i in _picked(t_ids, quota, lq.seed)]
    return passed, rejected, foreign


def quality_stage(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> StageStats:
    """Train (or reuse) the model and score every shard in `shards`; see the module doc."""
    from pipelines.data.quality import RULE, QualityModel, train, training_set

    lq = cfg.filters.learned
    upstream = {s: upstream_key(store, "filtered_documents", s) for s in sorted(shards)}
    config = _model_config(cfg)
    with store.lock(ASSET):
        prev = store.manifest(ASSET)
        pextra = prev["stats"]["extra"] if prev else {}
        docs = {s: pq.read_metadata(store.part("filtered_documents", s)).num_rows for s in upstream}
        total = sum(docs.values())
        reuse = (lq.enabled and pextra.get("model_config") == config and pextra.get("trained_docs")
                 and total <= GROWTH * pextra["trained_docs"] and (store.dir(ASSET) / MODEL_FILE).exists()
                 and store.damage(ASSET, full=True) is None)  # the model and scores reused are the committed ones
        model_hash = pextra.get("model_hash", "") if reuse else None
        key = cache_key(ASSET, config, model_hash or "new", json.dumps(upstream, sort_keys=True))
        if reuse and (hit := store.cached(ASSET, None, key)):
            return hit
        passed_docs = total  # filtered documents are the ones every rule kept
        if not lq.enabled or (not reuse and passed_docs < lq.min_documents):
            why = ("filters.learned.enabled is false" if not lq.enabled else
                   f"{passed_docs} documents passed the rules, fewer than filters.learned.min_documents="
                   f"{lq.min_documents}: too few to learn from")
            off = cache_key(ASSET, config, "off", json.dumps(upstream, sort_keys=True))
            if hit := store.cached(ASSET, None, off):
                return hit
            stats = StageStats(key=off, docs_in=total, docs_out=total,
                               extra={"enabled": False, "off_because": why, "shard_inputs": upstream,
                                      "shard_digests": dict.fromkeys(upstream, "off"), "model_config": config})
            store.commit(ASSET, None, stats, {})
            return stats
        if reuse:
            model = QualityModel.load(store.dir(ASSET) / MODEL_FILE)
            trained_docs, report = pextra["trained_docs"], pextra["report"]
        else:
            passed, rejected, foreign = _sample(store, list(upstream), cfg)
            good = _read_good_examples(lq.good_examples, cfg) if lq.good_examples else []
            model = train(training_set(passed, rejected, lq, good, foreign), lq)
            trained_docs, report = total, model.report
        blob = model.to_bytes()
        model_hash = model_hash or xxhash.xxh3_128_hexdigest(blob)
        key = cache_key(ASSET, config, model_hash, json.dumps(upstream, sort_keys=True))
        before = pextra.get("shard_inputs", {}) if reuse else {}
        tables: dict[str, pa.Table] = {}
        digests, dropped, all_scores = {}, 0, []
        for shard, filtered in upstream.items():
            old = store.dir(ASSET) / scores_file(shard)
            if before.get(shard) == filtered and old.exists():  # same model, same documents: same scores
                table = pq.read_table(old)
                scores = table["score"].to_numpy()
            else:
                docs_table = read_table(store.part("filtered_documents", shard), ["doc_id", "text"])
                scores = model.score(docs_table["text"].to_pylist())
                table = pa.table({"doc_id": docs_table["doc_id"], "score": pa.array(scores, pa.float32())})
            tables[shard] = table
            all_scores.append(scores)
            low = model.drops(scores)
            dropped += int(low.sum())
            low_ids = sorted(np.asarray(table["doc_id"].to_pylist(), dtype=object)[low].tolist())
            digests[shard] = xxhash.xxh3_64_hexdigest(json.dumps([model_hash, filtered, low_ids]).encode())

        def write(directory: Path) -> list[str]:
            (directory / MODEL_FILE).write_bytes(blob)
            for shard, table in tables.items():
                pq.write_table(table, directory / scores_file(shard), compression="zstd")
            return [MODEL_FILE, *(scores_file(shard) for shard in tables)]

        scores = np.concatenate(all_scores) if all_scores else np.zeros(0, np.float32)
        stats = StageStats(
            key=key, docs_in=total, docs_out=total - dropped, rejected=dropped, drops={RULE: dropped} if dropped else {},
            extra={"enabled": True, "threshold": model.threshold, "retrained": not reuse, "trained_docs": trained_docs,
                   "model_hash": model_hash, "model_config": config, "report": report,
                   "score_histogram": _histogram(scores, model.threshold),
                   "shard_digests": digests, "shard_inputs": upstream})
        store.commit(ASSET, None, stats, {}, write=write)
        return stats


def _histogram(scores: np.ndarray, threshold: float, bins: int = 20) -> dict[str, object]:
    counts, edges = np.histogram(scores, bins=bins, range=(0.0, 1.0))
    return {"edges": [round(float(e), 3) for e in edges], "counts": counts.tolist(), "threshold": threshold}


def shard_decisions(store: DataStore, shard: str, filtered_key: str) -> tuple[str, dict[str, float], float] | None:
    """(digest, {doc_id: score} of the documents it drops, threshold) for deduped_documents;
    None when the learned signal is off. Raises StaleQualityError when the model has not
    scored this shard's current filtered documents."""
    m = store.manifest(ASSET)
    if m is None:
        raise StaleQualityError("quality_model has not been materialized yet")
    extra = m["stats"]["extra"]
    if extra.get("shard_inputs", {}).get(shard) != filtered_key:
        raise StaleQualityError(f"quality_model has not scored the current filtered documents of {shard!r}; "
                                "materialize quality_model first")
    if not extra.get("enabled", True):
        return None
    table = pq.read_table(store.verified(ASSET) / scores_file(shard))
    threshold = float(extra["threshold"])
    low = table.filter(pc.less(table["score"], threshold))
    return extra["shard_digests"][shard], dict(zip(low["doc_id"].to_pylist(), low["score"].to_pylist())), threshold


def current_digests(store: DataStore, cfg: YunqueConfig, filtered: dict[str, str]) -> dict[str, str] | None:
    """The per-shard digests deduped_documents keys on, if the committed quality_model is
    the one a run would produce now over these shards' filtered documents (`filtered`:
    shard -> key); else None (it has work to do). For `stages.data.plan`."""
    m = store.manifest(ASSET)
    if m is None:
        return None
    extra = m["stats"]["extra"]
    if extra.get("model_config") != _model_config(cfg) or extra.get("shard_inputs") != filtered:
        return None
    if store.cached(ASSET, None, m["key"]) is None:
        return None
    return extra["shard_digests"]
