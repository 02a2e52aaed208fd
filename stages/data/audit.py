"""Invariants the asset checks assert, as plain functions over the stored tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from pipelines.data.langid import detect, model_input
from stages.store.outputs import DataStore

REJECT_STAGES = ("read", "clean", "filter", "dedup")


@dataclass
class Accounting:
    read: int
    kept: int
    rejected: int
    missing: list[str] = field(default_factory=list)  # read but neither kept nor rejected
    duplicated: list[str] = field(default_factory=list)  # appear more than once
    unknown: list[str] = field(default_factory=list)  # kept/rejected but never read

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.unknown)


def _ids(path) -> list[str]:
    return pq.read_table(path, columns=["doc_id"])["doc_id"].to_pylist() if path.exists() else []


def exactly_once(store: DataStore, shard: str) -> Accounting:
    """Every document read from the shard appears exactly once across the kept table and
    the rejections of all stages."""
    read = set(_ids(store.part("raw_documents", shard))) | set(_ids(store.rejected(shard, "read")))
    kept = _ids(store.part("deduped_documents", shard))
    rejected = [i for st in REJECT_STAGES for i in _ids(store.rejected(shard, st))]
    counts = Counter(kept + rejected)
    return Accounting(
        read=len(read), kept=len(kept), rejected=len(rejected),
        missing=sorted(read - counts.keys())[:20],
        duplicated=sorted(k for k, v in counts.items() if v > 1)[:20],
        unknown=sorted(counts.keys() - read)[:20],
    )


@dataclass
class Purity:
    checked: int
    labelled_other: int  # kept rows whose stored `lang` is not the target
    relabelled: int  # final texts labelled again: changed, within what language ID reads, since it read them
    redetected_target: float  # share of those that fastText labels as the target again (1.0 when none)
    # (doc_id, source, stored lang, fastText's label and probability) of the relabelled texts not in the target
    off_target: list[tuple[str, str, str, str, float]] = field(default_factory=list)


def _changed(kept, clean_path, max_chars: int) -> list[bool]:
    """For each kept row, does language ID's input differ from the one it labelled (its
    clean text's)?"""
    seen: dict[str, str] = {}
    if clean_path.exists():
        t = pq.read_table(clean_path, columns=["doc_id", "text"])
        seen = dict(zip(t["doc_id"].to_pylist(), t["text"].to_pylist()))
    out = []
    for doc_id, text in zip(kept["doc_id"].to_pylist(), kept["text"].to_pylist()):
        before = seen.get(doc_id)
        out.append(before is None or before != text and model_input(before, max_chars) != model_input(text, max_chars))
    return out


def language_purity(store: DataStore, shard: str, language: str, sample: int = 500, max_chars: int = 1000) -> Purity:
    """Stored labels of every kept document, and fastText run again on the final texts
    that could label differently. Language ID labelled each clean text by its first
    `max_chars` characters, whitespace folded (`langid.model_input`); a final text with the
    same input gets the same label from the same model (it is deterministic), which the
    filter required to be the target. So only the texts that a quality rule or paragraph
    dedup changed within that input are labelled again, up to `sample` of them: all of the
    shard's risk and none of the repeated work (labelling a sample of unchanged texts cost
    40 ms a shard, four times the rest of its deduped step)."""
    kept = pq.read_table(store.part("deduped_documents", shard), columns=["doc_id", "source", "text", "lang"])
    ids, langs = kept["doc_id"].to_pylist(), kept["lang"].to_pylist()
    changed = [(i, src, text, lang) for i, src, text, lang, moved in
               zip(ids, kept["source"].to_pylist(), kept["text"].to_pylist(), langs,
                   _changed(kept, store.part("clean_documents", shard), max_chars))
               if moved][:sample]
    again = detect([text for _, _, text, _ in changed], max_chars) if changed else []
    off = [(i, src, lang, label, p) for (i, src, _, lang), (label, p) in zip(changed, again) if label != language]
    share = 1 - len(off) / len(again) if again else 1.0
    return Purity(checked=len(langs), labelled_other=sum(1 for l in langs if l != language), relabelled=len(again),
                  redetected_target=share, off_target=off)


# A shard is said to be in another language when at least this share of what reached
# language ID was dropped as `langid:other_language`.
OTHER_LANGUAGE_SHARE = 0.5


@dataclass
class LanguageFinding:
    shard: str
    documents: int  # that reached language ID (filtered_documents' input)
    other_language: int  # dropped as langid:other_language
    found: str  # fastText's most frequent label among them ("" when none)
    found_count: int
    target: str

    @property
    def share(self) -> float:
        return self.other_language / self.documents if self.documents else 0.0

    @property
    def mostly_other(self) -> bool:
        return self.documents > 0 and self.share >= OTHER_LANGUAGE_SHARE

    def line(self) -> str:
        what = (f"{self.other_language} of {self.documents} documents ({self.share:.0%}) dropped as "
                f"langid:other_language")
        if not self.other_language:
            return f"shard {self.shard}: {self.documents} documents, none in another language than {self.target}"
        return (f"shard {self.shard}: {what}; fastText says {self.found} for {self.found_count} of them; the run "
                f"keeps {self.target}")


def language_finding(store: DataStore, shard: str, target: str) -> LanguageFinding | None:
    """What language ID made of a shard, from filtered_documents' stats (None before it ran)."""
    m = store.manifest("filtered_documents", shard)
    if m is None:
        return None
    stats = m["stats"]
    labels = {k: v for k, v in stats.get("extra", {}).get("languages", {}).items() if k != target}
    found, count = max(labels.items(), key=lambda kv: kv[1]) if labels else ("", 0)
    return LanguageFinding(shard, stats["docs_in"], stats.get("drops", {}).get("langid:other_language", 0),
                           found, count, target)


def empty_corpus_cause(store: DataStore, shards: list[str], target: str) -> str | None:
    """One line naming why no shard kept a document and what to change, or None when some
    shard kept one (or none has been filtered yet)."""
    manifests = {s: store.manifest("filtered_documents", s) for s in shards}
    done = {s: m["stats"] for s, m in manifests.items() if m is not None}
    if not done or any(st["docs_out"] for st in done.values()):
        return None
    read = sum(st["docs_in"] for st in done.values())
    drops: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    for st in done.values():
        drops.update(st.get("drops", {}))
        labels.update({k: v for k, v in st.get("extra", {}).get("languages", {}).items() if k != target})
    head = f"no document kept: all {read} documents of {len(done)} shards that reached the quality filters were dropped"
    if not drops:
        return f"{head}; nothing reached them: check the corpus (yunque inspect rejected)"
    reason, n = drops.most_common(1)[0]
    if reason == "langid:other_language" and labels:
        lang, m = labels.most_common(1)[0]
        from pipelines import languages

        fix = (f"rerun with --language {lang}" if lang in languages.codes() else
               f"Yunque has no pack for {lang!r} (supported: {', '.join(languages.codes())})")
        return (f"{head}, {n} as langid:other_language: fastText says {lang} for {m}, the run keeps {target}; "
                f"{fix} (or a new home: it detects the language)")
    return (f"{head}, most as {reason} ({n}); see `yunque inspect rejected` and loosen that rule "
            f"(--overrides), or check the corpus")
