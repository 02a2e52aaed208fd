"""The per-shard document stages as plain functions: read, clean, filter.

Each takes the store, a shard and the config, returns `StageStats`, and is memoised by a
key built from its code version, the config sections it uses, and its input's key: a
re-run over an unchanged shard does no work.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from pipelines.data.corpus import ShardInfo
from pipelines.data.documents import (
    FILTERED_SCHEMA,
    Rejection,
    documents_table,
    rejections_table,
    text_bytes,
)
from stages.config import YunqueConfig
from stages.data import personal_data
from stages.store.keys import cache_key, stage_key, upstream_key
from stages.store.outputs import DataStore, StageStats, drop_counts, read_table
from stages.store.versions import CODE_VERSIONS

log = logging.getLogger(__name__)




def read_key(cfg: YunqueConfig, fingerprint: str) -> str:
    """raw_documents' key: the reader settings and the shard's files as listed."""
    return stage_key("raw_documents", cfg, ("reader", "pii"), fingerprint, cfg.language)


def clean_key(cfg: YunqueConfig, raw: str) -> str:
    # pii and the language: the rejections' stored text is redacted (stages.data.personal_data)
    return stage_key("clean_documents", cfg, ("clean", "pii"), raw, cfg.language)


def filter_key(cfg: YunqueConfig, clean: str) -> str:
    """filtered_documents' key: language ID settings, the filters as the tree resolved them
    (profile and any adopted calibration) and the cleaned documents' key."""
    from stages.data.filter_profile import filters_key

    return cache_key("filtered_documents", CODE_VERSIONS["filtered_documents"], cfg.section_hash("langid", "pii"),
                     cfg.language, filters_key(cfg.filters), clean)


def _rejections_from_table(table: pa.Table, shard: str, stage: str, reasons: list[str], details: list[str]) -> pa.Table:
    rows = table.select(["doc_id", "source", "text"]).to_pylist()
    return rejections_table(
        [
            Rejection(r["doc_id"], shard, r["source"], stage, reason, detail, r["text"])
            for r, reason, detail in zip(rows, reasons, details)
        ]
    )


def read_stage(store: DataStore, fs, root: str, shard: ShardInfo, cfg: YunqueConfig, progress: bool = False) -> StageStats:
    from pipelines.data.readers.shard import read_shard

    key = read_key(cfg, shard.fingerprint)
    with store.lock("raw_documents", shard.key):
        if hit := store.cached("raw_documents", shard.key, key):
            return hit
        docs, rejections = read_shard(fs, root, shard, cfg.reader, progress=progress)
        table = documents_table(docs)
        rej = personal_data.redact_rejections(rejections_table(rejections), cfg)
        stats = StageStats(
            key=key,
            docs_in=len(docs) + len(rejections),
            docs_out=len(docs),
            rejected=len(rejections),
            bytes_in=sum(size for _, size, _ in shard.files),
            bytes_out=text_bytes(table),
            drops=drop_counts([r.reason for r in rejections]),
            extra={"files": len(shard.files), "fingerprint": shard.fingerprint,
                   "formats": drop_counts(table["format"].to_pylist())},
        )
        store.commit("raw_documents", shard.key, stats, {"part-0.parquet": table},
                     side={store.rejected(shard.key, "read"): rej})
        return stats


def clean_stage(store: DataStore, shard: str, cfg: YunqueConfig, progress: bool = False) -> StageStats:
    from pipelines.data.extract import html_to_text, normalize_text

    key = clean_key(cfg, upstream_key(store, "raw_documents", shard))
    with store.lock("clean_documents", shard):
        if hit := store.cached("clean_documents", shard, key):
            return hit
        raw = read_table(store.part("raw_documents", shard))
        texts = raw["text"].to_pylist()
        formats = raw["format"].to_pylist()
        c = cfg.clean
        out: list[str] = []
        for text, fmt in _progress(zip(texts, formats), progress, len(texts), f"clean {shard}"):
            if fmt == "html":
                text = html_to_text(text, c.extractor)
            out.append(normalize_text(text, c.unicode_form, c.fix_mojibake))
        keep = [len(t.strip()) >= c.min_chars for t in out]
        cleaned = raw.set_column(raw.schema.get_field_index("text"), "text", pa.array(out, pa.string()))
        kept = cleaned.filter(pa.array(keep))
        dropped_idx = [i for i, k in enumerate(keep) if not k]
        dropped = raw.take(pa.array(dropped_idx, pa.int64()))  # reject with the original text: nothing is lost
        reasons = ["empty_after_extraction"] * len(dropped_idx)
        details = [f"{s}: no text left after {'HTML extraction' if f == 'html' else 'normalisation'}"
                   for s, f in zip(dropped["source"].to_pylist(), dropped["format"].to_pylist())]
        rej = personal_data.redact_rejections(_rejections_from_table(dropped, shard, "clean", reasons, details), cfg)
        stats = StageStats(key=key, docs_in=raw.num_rows, docs_out=kept.num_rows, rejected=len(dropped_idx),
                           bytes_in=text_bytes(raw), bytes_out=text_bytes(kept), drops=drop_counts(reasons),
                           extra={"extractor": c.extractor})
        store.commit("clean_documents", shard, stats, {"part-0.parquet": kept},
                     side={store.rejected(shard, "clean"): rej})
        return stats


def filter_stage(store: DataStore, shard: str, cfg: YunqueConfig, progress: bool = False) -> StageStats:
    """Personal data first (`stages.data.personal_data`: everything after it, rejections
    included, sees placeholders, never values), then fastText language ID, then the quality
    rules (FineWeb's order: a French page is reported as French, not as 'too few Spanish
    stop words'). Every rule's metric is
    measured on each document that passes language ID (`filter_metrics.parquet`, for the
    report of `stages.reports.filters.report`), not only up to its first failing rule."""
    from pipelines.data.filters import QualityFilters
    from pipelines.data.langid import detect
    from stages.data.filter_profile import filters_key
    from stages.reports.filters.report import FILTER_METRICS, metrics_table

    fkey = filters_key(cfg.filters)  # the thresholds in use, not the calibration's id
    key = filter_key(cfg, upstream_key(store, "clean_documents", shard))
    with store.lock("filtered_documents", shard):
        if hit := store.cached("filtered_documents", shard, key):
            return hit
        clean = read_table(store.part("clean_documents", shard))
        red = personal_data.redact(clean["text"].to_pylist(), cfg)
        texts = red.texts
        clean = clean.set_column(clean.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
        lid = cfg.langid
        langs = detect(texts, lid.max_chars, lid.batch_size)
        filters = QualityFilters(cfg.filters)
        rules = filters.rules()
        metrics: dict[str, list[float | None]] = {r.reason: [None] * len(texts) for r in rules}
        reasons: list[str | None] = []
        details: list[str] = []
        new_texts: list[str] = []
        sources = clean["source"].to_pylist()
        for i, (text, (lang, score), src) in enumerate(
                _progress(zip(texts, langs, sources), progress, len(texts), f"filter {shard}")):
            if kind := red.drops[i]:
                reasons.append(f"pii:{kind}")
                details.append(personal_data.drop_detail(src, red.counts[i], kind))
                new_texts.append(text)
                continue
            if lang != lid.language or score < lid.threshold:
                why = "other_language" if lang != lid.language else "low_confidence"
                reasons.append(f"langid:{why}")
                details.append(f"{src}: fastText says {lang} ({score:.2f}); want {lid.language} >= {lid.threshold}")
                new_texts.append(text)
                continue
            res, measured = filters.evaluate(text)
            for reason, value in measured.items():
                if reason in metrics:
                    metrics[reason][i] = value
            reasons.append(None if res.keep else res.reason)
            details.append("" if res.keep else f"{src}: {res.reason}")
            new_texts.append(res.text if res.keep else text)
        keep = pa.array([r is None for r in reasons])
        table = clean.set_column(clean.schema.get_field_index("text"), "text", pa.array(new_texts, pa.string()))
        table = table.append_column("lang", pa.array([l for l, _ in langs], pa.string()))
        table = table.append_column("lang_score", pa.array([s for _, s in langs], pa.float32()))
        kept = table.filter(keep)
        drop_idx = [i for i, r in enumerate(reasons) if r is not None]
        dropped = clean.take(pa.array(drop_idx, pa.int64()))
        drop_reasons = [reasons[i] for i in drop_idx]
        rej = rejections_table([
            Rejection(d, shard, s, r.split(":")[0] if r.startswith(("langid", "pii")) else "filter", r, details[i], t)
            for i, d, s, t, r in zip(drop_idx, dropped["doc_id"].to_pylist(), dropped["source"].to_pylist(),
                                     dropped["text"].to_pylist(), drop_reasons)
        ])
        # what names the thresholds in use (profile, adopted calibration): shown with the report
        profile = {"profile": cfg.filters.profile, "calibration": cfg.filters.calibration, "language": cfg.filters.language,
                   "filters_key": fkey}
        side_metrics = metrics_table(clean["doc_id"], clean["source"], reasons, [l for l, _ in langs],
                                     [s for _, s in langs], rules, metrics, profile)
        stats = StageStats(key=key, docs_in=clean.num_rows, docs_out=kept.num_rows, rejected=len(drop_idx),
                           bytes_in=text_bytes(clean), bytes_out=text_bytes(kept), drops=drop_counts(drop_reasons),
                           extra={"languages": drop_counts([l for l, _ in langs]), "filter_profile": profile,
                                  **personal_data.summary(red), "pii_settings": personal_data.settings(cfg)})
        pii_counts = personal_data.counts_table(clean["doc_id"], clean["source"], [r is None for r in reasons], red)
        store.commit("filtered_documents", shard, stats,
                     {"part-0.parquet": kept.cast(FILTERED_SCHEMA), FILTER_METRICS: side_metrics,
                      personal_data.PII_COUNTS: pii_counts},
                     side={store.rejected(shard, "filter"): rej})
        return stats


def _progress(it, enabled: bool, total: int, desc: str):
    if not enabled:
        return it
    from tqdm import tqdm

    return tqdm(it, total=total, desc=desc, unit="doc", leave=False)
