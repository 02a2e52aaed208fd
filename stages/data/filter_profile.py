"""Calibrating the quality rules on a home's documents, and the filters a run uses.

`calibrate` measures every rule's metric (`QualityFilters.evaluate`) on the clean
documents of the home's shards and, optionally, on a reference folder of known-good
documents (read and cleaned as `read_stage`/`clean_stage` do), and proposes thresholds
(`pipelines.data.calibrate`). `save_proposal` writes it to
`<home>/calibration/filters-<id>.json` (one rename, pushed to a remote home). A user
adopts it with one override, `{"filters.calibration": "<id>"}`: the configuration tree
is built with the proposal's thresholds written in (`stages.settings.tree`, which loads
them with `load_proposal`), and `filters_key` hashes those thresholds (not the id), so the
filtered_documents cache key changes exactly when the thresholds do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path

from pipelines.config import CleanConfig, FilterConfig, ReaderConfig
from pipelines.data.calibrate import Proposal, propose
from pipelines.data.filters import QualityFilters
from stages.store.outputs import DataStore, read_table, write_json

CALIBRATION_DIR = "calibration"


def proposal_path(store: DataStore, proposal_id: str) -> Path:
    return store.home / CALIBRATION_DIR / f"filters-{proposal_id}.json"


def measure(filters: QualityFilters, texts: Iterable[str]) -> dict[str, list[float]]:
    """Metric columns (reason -> one value per text), aligned: the i-th value of every
    column is the i-th text's, NaN (drops nothing) where a text did not report the metric.
    `propose` counts a document's drops across columns (once however many rules it fails),
    so a column must not skip a text."""
    columns: dict[str, list[float]] = {}
    for i, text in enumerate(texts):
        _, metrics = filters.evaluate(text)
        for reason, value in metrics.items():
            columns.setdefault(reason, [math.nan] * i).append(value)
        for column in columns.values():
            if len(column) <= i:
                column.append(math.nan)
    return columns


def clean_shards(store: DataStore) -> list[str]:
    """The shards whose clean_documents are committed in this home."""
    root = store.dir("clean_documents")
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "part-0.parquet").exists())


def corpus_texts(store: DataStore, shards: list[str]) -> list[str]:
    texts: list[str] = []
    for shard in shards:
        texts += read_table(store.part("clean_documents", shard), columns=["text"])["text"].to_pylist()
    return texts


def reference_texts(folder: str, reader: ReaderConfig, clean: CleanConfig) -> list[str]:
    """The documents of a folder (any format the corpus readers take), cleaned as the
    clean stage cleans them."""
    from pipelines.data.corpus import open_corpus
    from pipelines.data.extract import html_to_text, normalize_text
    from pipelines.data.readers.shard import read_shard

    path = Path(folder).absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"reference folder {folder} does not exist or is not a directory")
    fs, root = open_corpus(str(path.parent))
    docs, _ = read_shard(fs, root, path.name, reader)
    out = []
    for d in docs:
        text = html_to_text(d.text, clean.extractor) if d.format == "html" else d.text
        text = normalize_text(text, clean.unicode_form, clean.fix_mojibake)
        if len(text.strip()) >= clean.min_chars:
            out.append(text)
    return out


def calibrate(store: DataStore, cfg: FilterConfig, shards: list[str] | None = None,
              reference: str | None = None, reader: ReaderConfig | None = None,
              clean: CleanConfig | None = None, tail: float = 0.02, margin: float = 0.05) -> Proposal:
    """A proposal for `cfg`'s rules (the tree's filters: an adopted calibration's thresholds
    are already in them) from the home's clean documents (all shards, or `shards`) and the
    optional reference folder."""
    shards = shards or clean_shards(store)
    if not shards:
        raise FileNotFoundError(f"no clean_documents in {store.url}: run the graph up to clean_documents first")
    filters = QualityFilters(cfg)
    corpus = measure(filters, corpus_texts(store, shards))
    ref = None
    if reference is not None:
        ref_texts = reference_texts(reference, reader or ReaderConfig(), clean or CleanConfig())
        if not ref_texts:
            raise ValueError(f"reference folder {reference} holds no readable documents")
        ref = measure(filters, ref_texts)
    return propose(filters.rules(), corpus, ref, tail, margin,
                   settings={"shards": shards, "reference": reference, "profile": cfg.profile,
                             "language": cfg.language})


def save_proposal(store: DataStore, proposal: Proposal) -> Path:
    """Write the proposal under the home (atomically; pushed to a remote home)."""
    path = proposal_path(store, proposal.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, proposal.to_json())
    if store.remote is not None:  # one PUT: an object appears whole or not at all
        store.remote.write_text(f"{CALIBRATION_DIR}/{path.name}", path.read_text())
    return path


def load_proposal(store: DataStore, proposal_id: str) -> Proposal:
    path = proposal_path(store, proposal_id)
    if not path.exists() and store.remote is not None:
        text = store.remote.read_text(f"{CALIBRATION_DIR}/{path.name}")
        if text is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if not path.exists():
        where = f"{store.url}/{CALIBRATION_DIR}/{path.name}" if store.remote is not None else str(path)
        raise FileNotFoundError(f"filters.calibration {proposal_id!r}: no calibration proposal at {where} "
                                f"(run `yunque calibrate` and adopt the id it prints)")
    proposal = Proposal.from_json(json.loads(path.read_text()))
    if proposal.id != proposal_id:  # named by its thresholds: other thresholds are a damaged file
        raise ValueError(f"{path}: its thresholds are not those of proposal {proposal_id!r} (they hash to "
                         f"{proposal.id!r}): the file was changed; run `yunque calibrate` again")
    return proposal


def filters_key(cfg: FilterConfig) -> str:
    """Hash of the filters as the tree resolved them (thresholds, not the proposal id): the
    filtered_documents cache key's share of the filter configuration."""
    resolved = dataclasses.asdict(cfg)
    resolved.pop("calibration", None)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]
