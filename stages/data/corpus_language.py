"""Which language a corpus is in, from a sample of every shard: what a new home defaults to
when the user names no language, so that a French corpus is never filtered as Spanish and
silently emptied.

Each shard gives its first `per_shard` documents (files in sorted order, as the read stage
reads them), HTML extracted and normalised as the clean stage does; fastText labels each.
The corpus' language is the label of most sampled documents over all shards, so a mixed
corpus picks its majority; shards whose own majority differs are named.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import islice

from pipelines import languages
from pipelines.config import CleanConfig, ReaderConfig
from pipelines.data.documents import Document
from pipelines.data.readers.shard import iter_shard


@dataclass
class CorpusLanguage:
    code: str | None  # the majority label, when a supported language; None otherwise
    label: str  # fastText's majority label ("fr", or "ja" for an unsupported one)
    share: float  # of the sampled documents
    documents: int  # sampled
    per_shard: dict[str, tuple[str, float]] = field(default_factory=dict)  # shard: (majority, share)

    def line(self) -> str:
        """One line for the user."""
        if not self.documents:
            return "no readable document in the corpus to detect its language from"
        minority = {s: v for s, v in self.per_shard.items() if v[0] != self.label}
        extra = ("; shards mostly in another language: "
                 + ", ".join(f"{s} ({lang} {share:.0%})" for s, (lang, share) in sorted(minority.items()))
                 if minority else "")
        if self.code is None:
            return (f"the corpus is mostly {self.label!r} ({self.share:.0%} of {self.documents} sampled "
                    f"documents), which Yunque has no language pack for; supported: "
                    f"{', '.join(languages.codes())}{extra}")
        name = languages.get(self.code).name
        return (f"language: {self.code} ({name}), detected in {self.share:.0%} of {self.documents} documents "
                f"sampled from {len(self.per_shard)} shards{extra}")


def detect_corpus_language(corpus: str, storage_options: dict | None = None, per_shard: int = 20,
                           reader: ReaderConfig | None = None, clean: CleanConfig | None = None,
                           max_chars: int = 1000) -> CorpusLanguage:
    """The language of most of the first `per_shard` documents of every shard."""
    from pipelines.data.corpus import list_shards, open_corpus
    from pipelines.data.extract import html_to_text, normalize_text
    from pipelines.data.langid import detect

    reader, clean = reader or ReaderConfig(), clean or CleanConfig()
    fs, root = open_corpus(corpus, storage_options)
    texts: list[str] = []
    owners: list[str] = []
    for shard in list_shards(fs, root):
        docs = (d for d in iter_shard(fs, root, shard, reader) if isinstance(d, Document))
        for doc in islice(docs, per_shard):
            text = html_to_text(doc.text, clean.extractor) if doc.format == "html" else doc.text
            text = normalize_text(text, clean.unicode_form, clean.fix_mojibake)
            if text.strip():
                texts.append(text)
                owners.append(shard.key)
    labels = [lang for lang, _ in detect(texts, max_chars)] if texts else []
    if not labels:
        return CorpusLanguage(None, "und", 0.0, 0)
    label, n = Counter(labels).most_common(1)[0]
    per: dict[str, Counter[str]] = {}
    for owner, lang in zip(owners, labels):
        per.setdefault(owner, Counter())[lang] += 1
    per_shard_major = {s: (c.most_common(1)[0][0], c.most_common(1)[0][1] / sum(c.values())) for s, c in per.items()}
    try:
        code = languages.normalise(label)
    except languages.UnknownLanguage:
        code = None
    return CorpusLanguage(code, label, n / len(labels), len(labels), per_shard_major)
