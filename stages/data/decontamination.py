"""eval_contamination (whole corpus): the evaluation sets looked up in the training split,
as a memoised stage (no Dagster), and the purified split base_model trains on when asked.

The sets are every one the project scores or is told about: the held-out math problems
(in both wordings) and a GSM8K file, the held-out domain QA pairs, the user's own files
and the data files of the harness tasks enabled. The domain QA pairs are made clean: of
CANDIDATE_PAIRS candidates, the first SCORED_PAIRS that share no n-gram with the training
split are the ones eval_report scores. It writes data/eval_contamination/ (report.json,
hits.parquet, domain_qa.jsonl, purified/). docs/evaluation.md#decontamination-eval_contamination.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.data.decontamination import EvalItem, NgramIndex
from pipelines.data.documents import REJECT_SCHEMA
from pipelines.tasks import math_tasks, packs
from pipelines.tasks.harness_tasks import task_data_files
from pipelines.tokens.token_format import HEADER, TokenShard
from pipelines.tokens.tokenizer import file_hash
from stages.asset_names import EVAL_CONTAMINATION, TOKEN_SHARDS
from stages.config import YunqueConfig
from stages.data.domain_qa import (
    CANDIDATE_PAIRS,
    SCORED_PAIRS,
    SPLITS_FILE,
    document_splits,
    encoded_shards,
    heldout_pairs,
    order_key,
)
from stages.store.keys import cache_key
from stages.store.outputs import READ_BATCH, DataStore, StageStats, write_jsonl
from stages.store.versions import CODE_VERSIONS

ASSET = EVAL_CONTAMINATION
QA_FILE = "domain_qa.jsonl"
STAGE = "decontamination"  # rejected_documents/<shard>/decontamination.parquet
REASON = "eval_contamination"
PURIFIED = "purified"
METHOD = ("GPT-3 (Brown et al. 2020, appendix C): an evaluation item is contaminated when any of its word "
          "n-grams occurs in a training document; words lowercased, punctuation dropped, accents folded, digits kept")


class DecontaminationError(ValueError):
    """An evaluation file that cannot be read; the message names the file and record."""


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def read_eval_file(path: str | Path) -> list[EvalItem]:
    """Items of a user's evaluation file: each jsonl line or parquet row is one item, its
    text every string in the record (the GSM8K fields, a chat's contents, choices)."""
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise DecontaminationError(f"decontamination.eval_files: {path} does not exist")
    records: list[tuple[str, Any]] = []
    if path.suffix == ".parquet":
        records = [(f"row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist())]
    elif path.suffix in (".jsonl", ".json"):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    records.append((f"line {lineno}", json.loads(line)))
                except ValueError as e:
                    raise DecontaminationError(f"{path}, line {lineno}: not JSON ({e})") from None
    else:
        raise DecontaminationError(f"decontamination.eval_files: {path}: expected .jsonl or .parquet")
    return [EvalItem(name, f"{name}:{where}", "\n".join(_strings(r))) for where, r in records]


QA_SET = "domain_qa"


def _qa_id(p: dict) -> str:
    return f"{p['doc_id']}#{order_key(p)[:12]}"


def eval_sets(store: DataStore, shards: Sequence[str], cfg: YunqueConfig) -> tuple[dict[str, list[EvalItem]], list[dict]]:
    """({set name: items}: every evaluation set the project scores or was given, with the
    domain QA candidates; the candidate pairs themselves)."""
    e = cfg.eval
    sets: dict[str, list[EvalItem]] = {}
    # the math sets of the corpus' language ("add2" is cfg.language's); none without its math.toml
    math_set = math_tasks.eval_set_name(e.math_set, cfg.language)
    for name in filter(None, [math_set, math_set and math_tasks.rephrased_twin(math_set)]):
        if name != "gsm8k":
            sets[name] = [EvalItem(name, p.id, p.question) for p in math_tasks.math_eval_set(
                name, e.math_problems, seed=e.seed, language=cfg.language)]
    if e.math_file:  # its questions only: no text of the language is needed (language None)
        sets["gsm8k"] = [EvalItem("gsm8k", p.id, p.question) for p in math_tasks.read_gsm8k(e.math_file, None)]
    pairs = heldout_pairs(store, CANDIDATE_PAIRS, shards, language=cfg.language)
    sets[QA_SET] = [EvalItem(QA_SET, _qa_id(p), p["messages"][-1]["content"]) for p in pairs]
    for f in cfg.decontamination.eval_files:
        items = read_eval_file(f)
        sets[items[0].set if items else Path(f).name] = items
    # the data of the harness tasks the user enabled (the shipped one is the domain QA pairs)
    try:
        harness_files = task_data_files(e.harness_include, e.harness)
    except ValueError as err:
        raise DecontaminationError(str(err)) from None
    for task, files in harness_files.items():
        sets[f"harness:{task}"] = [EvalItem(f"harness:{task}", i.item_id, i.text) for f in files
                                   for i in read_eval_file(f)]
    return sets, pairs


def _file_inputs(cfg: YunqueConfig) -> dict[str, str]:
    harness = [str(p) for fs in task_data_files(cfg.eval.harness_include, cfg.eval.harness).values() for p in fs]
    files = [*cfg.decontamination.eval_files, *([cfg.eval.math_file] if cfg.eval.math_file else []), *harness]
    return {f: file_hash(Path(f)) if Path(f).is_file() else "missing" for f in files}


def contamination_key(cfg: YunqueConfig, versions: dict[str, str]) -> str:
    """What the report depends on: the method's settings, the evaluation sets' settings and
    files, and the token shards (their documents and split)."""
    e = cfg.eval
    return cache_key(ASSET, CODE_VERSIONS[ASSET], cfg.section_hash("decontamination"), cfg.section_hash("language"),
                     [e.math_set, e.math_problems, e.seed, e.math_file, list(e.harness), list(e.harness_include)],
                     _file_inputs(cfg), sorted(versions.items()))


def _train_documents(store: DataStore, shard: str) -> Iterator[tuple[list[str], list[str], pa.Array]]:
    """(doc_ids, sources, texts) of the shard's train-split documents, a batch at a time."""
    splits = document_splits(store, shard)
    pf = pq.ParquetFile(store.part("deduped_documents", shard))
    for batch in pf.iter_batches(batch_size=READ_BATCH, columns=["doc_id", "source", "text"]):
        ids = batch.column("doc_id").to_pylist()
        keep = [i for i, d in enumerate(ids) if splits.get(d) == "train"]
        if keep:
            take = pa.array(keep, pa.int64())
            yield ([ids[i] for i in keep], batch.column("source").take(take).to_pylist(),
                   batch.column("text").take(take))


def decontamination_stage(store: DataStore, versions: dict[str, str], cfg: YunqueConfig,
                          progress: Callable[[str], None] | None = None) -> StageStats:
    """Look every evaluation set up in the train split of the shards `versions` names
    ({shard: token_shards data version}); write the report, and with purify the
    purified split and its rejections. Memoised on `contamination_key`."""
    d = cfg.decontamination
    key = contamination_key(cfg, versions)
    with store.lock(ASSET):
        if hit := store.cached(ASSET, None, key):
            return hit
        t0 = time.perf_counter()
        sets, candidates = eval_sets(store, sorted(versions), cfg)
        items = [i for s in sets.values() for i in s]
        index = NgramIndex(items, d.ngram, d.min_words, d.bloom_error)
        hits: list[dict] = []
        scanned = chars = 0
        found_docs: dict[tuple[str, str], tuple[str, str]] = {}  # (shard, doc_id) -> (source, text)
        for shard in sorted(versions):
            for ids, sources, batch in _train_documents(store, shard):
                scanned += len(ids)
                chars += int(pc.sum(pc.utf8_length(batch)).as_py() or 0)
                for doc, item, shared in index.scan(batch):
                    it = items[item]
                    hits.append({"set": it.set, "item_id": it.item_id, "item": it.text[:300], "shard": shard,
                                 "doc_id": ids[doc], "shared_ngrams": shared})
                    found_docs[(shard, ids[doc])] = (sources[doc], batch[doc].as_py() if d.purify else "")
            if progress:
                progress(f"eval_contamination: {shard} scanned ({scanned:,} training documents so far)")
        # the domain QA set: the first SCORED_PAIRS clean candidates (the others are replaced)
        dirty = {h["item_id"] for h in hits if h["set"] == QA_SET}
        scored = [p for p in candidates if _qa_id(p) not in dirty][:SCORED_PAIRS]
        replaced = sorted(dirty)
        hits = [h for h in hits if h["set"] != QA_SET]
        sets[QA_SET] = [i for i in sets[QA_SET] if i.item_id not in dirty][:SCORED_PAIRS]
        checkable = dict(zip(((i.set, i.item_id) for i in items), index.checkable.tolist(), strict=True))
        contaminated: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # shard -> doc -> items
        for h in hits:
            contaminated[h["shard"]][h["doc_id"]].append(f"{h['set']}:{h['item_id']}")
        report = _report(sets, checkable, hits, d, scanned, versions)
        report["domain_qa_replaced"] = replaced
        report["language"] = cfg.language
        if left := packs.left_out(cfg.language, (packs.MATH, packs.QA)):
            report["left_out"] = left  # the math sets and the domain QA pairs it could not make
        report["seconds"] = round(time.perf_counter() - t0, 2)
        report["chars_scanned"] = chars
        report["index_bytes"] = index.nbytes
        purified = d.purify and bool(contaminated)
        side: dict[Path, pa.Table] = {}
        if purified:
            for shard, docs in contaminated.items():
                side[store.rejected(shard, STAGE)] = pa.Table.from_pylist(
                    [{"doc_id": i, "shard": shard, "source": found_docs[(shard, i)][0], "stage": STAGE, "reason": REASON,
                      "detail": "found: " + ", ".join(what), "text": found_docs[(shard, i)][1]} for i, what in docs.items()],
                    schema=REJECT_SCHEMA)
        report["purified_shards"] = {s: _purified_key(versions[s], len(c)) for s, c in contaminated.items()} \
            if purified else {}
        report["passed"] = purified or report["within_limit"]
        stats = StageStats(key=key, docs_in=scanned, docs_out=scanned - (sum(map(len, contaminated.values()))
                                                                          if purified else 0),
                           rejected=sum(map(len, contaminated.values())) if purified else 0,
                           drops={REASON: sum(map(len, contaminated.values()))} if purified else {},
                           extra={k: v for k, v in report.items() if k != "examples"})

        def write(directory: Path) -> list[str]:
            (directory / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
            pq.write_table(pa.Table.from_pylist(hits, schema=HITS_SCHEMA), directory / "hits.parquet")
            write_jsonl(scored, directory / QA_FILE)
            names = ["report.json", "hits.parquet", QA_FILE]
            if purified:
                for shard, docs in contaminated.items():
                    _purify(store.verified(TOKEN_SHARDS, shard), directory / PURIFIED / shard, set(docs))
                names.append(PURIFIED)
            return names

        _forget_old_rejections(store, set(contaminated) if purified else set())
        store.commit(ASSET, None, stats, {}, side=side, write=write)
        return stats


HITS_SCHEMA = pa.schema([pa.field("set", pa.string()), pa.field("item_id", pa.string()),
                         pa.field("item", pa.string()), pa.field("shard", pa.string()),
                         pa.field("doc_id", pa.string()), pa.field("shared_ngrams", pa.int64())])


def _report(sets: dict[str, list[EvalItem]], checkable: dict[tuple[str, str], bool], hits: list[dict], d: Any, scanned: int,
            versions: dict[str, str]) -> dict:
    found: dict[str, set[str]] = defaultdict(set)
    for h in hits:
        found[h["set"]].add(h["item_id"])
    rows = {}
    for name, items in sets.items():
        n = len(items)
        share = len(found[name]) / n if n else 0.0
        rows[name] = {"items": n, "checkable": sum(checkable[(i.set, i.item_id)] for i in items),
                      "contaminated": len(found[name]), "share": round(share, 4),
                      "over_limit": share > d.max_contaminated}
    first: dict[tuple[str, str], dict] = {}
    for h in hits:
        first.setdefault((h["set"], h["item_id"]), h)
    return {"method": METHOD, "ngram": d.ngram, "min_words": d.min_words, "limit": d.max_contaminated,
            "sets": rows, "within_limit": not any(r["over_limit"] for r in rows.values()),
            "documents_scanned": scanned, "shards": sorted(versions), "token_shards": dict(sorted(versions.items())),
            "contaminated_documents": len({(h["shard"], h["doc_id"]) for h in hits}),
            "examples": list(first.values())[: d.examples]}


def _purified_key(version: str, removed: int) -> str:
    return cache_key(PURIFIED, version, removed)


def _purify(source: Path, target: Path, drop: set[str]) -> None:
    """A copy of the token shard at `source` whose train split leaves out the documents
    `drop`; the validation split is the same. documents.parquet marks the dropped ones
    with the split "contaminated" (index -1)."""
    target.mkdir(parents=True)
    shard = TokenShard.open(source)
    header = json.loads(json.dumps(shard.header))
    lineage = pq.read_table(source / SPLITS_FILE).to_pylist()
    train = shard.split("train")
    ids = [""] * train.documents
    for r in lineage:
        if r["split"] == "train":
            ids[r["index"]] = r["doc_id"]
    keep = np.array([i not in drop for i in ids], dtype=bool)
    lengths = np.diff(train.offsets)
    tokens = np.asarray(train.tokens)[np.repeat(keep, lengths)]  # documents keep their end-of-document token
    offsets = np.zeros(int(keep.sum()) + 1, dtype="<i8")
    np.cumsum(lengths[keep], out=offsets[1:])
    for name, array in (("train.bin", tokens), ("train.idx", offsets)):
        with open(target / name, "wb") as f:
            f.write(array.tobytes())
            f.flush()
            os.fsync(f.fileno())
    for name in ("val.bin", "val.idx"):
        shutil.copyfile(source / name, target / name)
    new_index = np.cumsum(keep) - 1
    rows = [{"doc_id": d, "split": "train", "index": int(new_index[i])} if keep[i]
            else {"doc_id": d, "split": "contaminated", "index": -1} for i, d in enumerate(ids)]
    rows += [r for r in lineage if r["split"] != "train"]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("doc_id", pa.string()), ("split", pa.string()),
                                                                ("index", pa.int64())])), target / SPLITS_FILE)
    # bytes stay those of the whole split: the header's byte count is a report, not a size
    header["splits"]["train"] |= {"documents": int(keep.sum()), "tokens": int(offsets[-1])}
    header["purified_from"] = str(source)
    header["contaminated_documents"] = int((~keep).sum())
    (target / HEADER).write_text(json.dumps(header, indent=1))
    TokenShard.open(target).verify()


def _forget_old_rejections(store: DataStore, keep: set[str]) -> None:
    """A shard whose documents are no longer removed loses its old rejection file."""
    root = store.data / "rejected_documents"
    if root.is_dir():
        for f in root.glob(f"*/{STAGE}.parquet"):
            if f.parent.name not in keep:
                os.remove(f)


def report(store: DataStore) -> dict | None:
    """The last report (None before the first materialization)."""
    m = store.manifest(ASSET)
    if m is None:
        return None
    return json.loads((store.dir(ASSET) / "report.json").read_text())


def training_shards(store: DataStore, versions: dict[str, str]) -> tuple[dict[str, str], dict[str, str], str]:
    """({shard: version base_model records}, {shard: directory to train on}, what the check
    said) for these token shard versions: the purified copy of a shard where the current
    report made one, the token shard itself elsewhere. Raises DecontaminationError when the
    report that covers exactly these shards failed."""
    dirs = {s: str(store.verified(TOKEN_SHARDS, s)) for s in versions}  # no training on a damaged token array
    m = store.manifest(ASSET)
    if m is None:
        return dict(versions), dirs, "not checked: eval_contamination has not been materialized"
    extra = m["stats"]["extra"]
    if extra.get("token_shards") != dict(sorted(versions.items())):
        return dict(versions), dirs, "not checked: eval_contamination covers other token shards (materialize it)"
    if not extra.get("passed"):
        over = {n: r["share"] for n, r in extra["sets"].items() if r["over_limit"]}
        raise DecontaminationError(
            f"eval_contamination found evaluation items in the training split above decontamination."
            f"max_contaminated={extra['limit']}: {over} (report: {store.dir(ASSET) / 'report.json'}); "
            "set decontamination.purify=true to train without those documents")
    out = dict(versions)
    for s, k in extra.get("purified_shards", {}).items():
        out[s] = k
        dirs[s] = str(store.verified(ASSET) / PURIFIED / s)
    n = sum(r["contaminated"] for r in extra["sets"].values())
    return out, dirs, (f"passed: {n} items found, {len(extra.get('purified_shards', {}))} shards purified"
                       if extra.get("purified_shards") else f"passed: {n} contaminated items")


def scored_pairs(store: DataStore, language: str = "es") -> list[dict] | None:
    """The held-out domain QA pairs eval_contamination chose (clean ones), when its report
    covers the home's encoded token shards as they are now, in `language`; None otherwise."""
    m = store.manifest(ASSET)
    if m is None or m["stats"]["extra"].get("language", "es") != language:
        return None
    current = {s: store.manifest(TOKEN_SHARDS, s)["key"] for s in encoded_shards(store)}
    covered = m["stats"]["extra"].get("token_shards", {})
    if any(covered.get(s) != v for s, v in current.items() if s in covered) or not covered or \
            set(covered) - set(current):
        return None
    path = store.dir(ASSET) / QA_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def eval_pairs(store: DataStore, language: str = "es") -> list[dict]:
    """The held-out domain QA pairs that are scored (eval_report, the evaluations during
    training, the shipped harness task), their questions in `language`: eval_contamination's
    clean choice when its report covers the home's shards (in that language), else (before
    it ran) the first held-out ones. None for a language whose pack has no qa.toml."""
    if not packs.has(language, packs.QA):
        return []
    pairs = scored_pairs(store, language)
    return heldout_pairs(store, SCORED_PAIRS, language=language) if pairs is None else pairs
