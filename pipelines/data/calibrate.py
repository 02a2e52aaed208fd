"""Threshold calibration of the quality rules, from measured metric distributions.

FineWeb-2 set its per-language thresholds by looking at each rule's metric on the
language's own data instead of reusing English numbers. Here the inputs are two metric
tables (reason -> one value per document, from `QualityFilters.evaluate`): the corpus,
and optionally a reference folder of documents the user knows are good. Per rule:

  * without a reference, the proposal cuts the corpus tail: the `tail` quantile on the
    dropping side (below-rules: the low tail, above-rules: the high tail);
  * with a reference, it must also keep every reference document: the threshold goes at
    least `margin` (relative) beyond the reference's most extreme value, and the corpus
    tail is cut only where that does not cross into the reference's range.

Flag rules (lorem ipsum, "{", empty) have no threshold to move and keep theirs. Integer
rules (word, stop word and sentence counts) round towards keeping. A proposal records,
per rule, the current and the proposed threshold and the share of corpus and reference
documents each would drop; `thresholds()` maps it onto the config (`apply_thresholds`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pipelines.config import FilterConfig
from pipelines.data.filters.rules import RuleSpec, fails

# reason -> (section, field) of FilterConfig. The n-gram rules live in lists (see _NGRAM).
FIELDS: dict[str, tuple[str, str]] = {
    "gopher_quality:min_doc_words": ("gopher_quality", "min_doc_words"),
    "gopher_quality:max_doc_words": ("gopher_quality", "max_doc_words"),
    "gopher_quality:min_avg_word_length": ("gopher_quality", "min_avg_word_length"),
    "gopher_quality:max_avg_word_length": ("gopher_quality", "max_avg_word_length"),
    "gopher_quality:hash_word_ratio": ("gopher_quality", "max_symbol_word_ratio"),
    "gopher_quality:ellipsis_word_ratio": ("gopher_quality", "max_symbol_word_ratio"),
    "gopher_quality:bullet_lines_ratio": ("gopher_quality", "max_bullet_lines_ratio"),
    "gopher_quality:ellipsis_lines_ratio": ("gopher_quality", "max_ellipsis_lines_ratio"),
    "gopher_quality:alpha_words_ratio": ("gopher_quality", "max_non_alpha_words_ratio"),
    "gopher_quality:min_stop_words": ("gopher_quality", "min_stop_words"),
    "gopher_repetition:dup_para_frac": ("gopher_repetition", "dup_para_frac"),
    "gopher_repetition:dup_para_char_frac": ("gopher_repetition", "dup_para_char_frac"),
    "gopher_repetition:dup_line_frac": ("gopher_repetition", "dup_line_frac"),
    "gopher_repetition:dup_line_char_frac": ("gopher_repetition", "dup_line_char_frac"),
    "c4:too_few_sentences": ("c4", "min_num_sentences"),
    "fineweb:line_punct_ratio": ("fineweb", "line_punct_thr"),
    "fineweb:short_line_ratio": ("fineweb", "short_line_thr"),
    "fineweb:char_dup_ratio": ("fineweb", "char_duplicates_ratio"),
    "fineweb:new_line_ratio": ("fineweb", "new_line_ratio"),
}
_NGRAM = re.compile(r"gopher_repetition:(top|dup)_(\d+)_gram")
INTEGER_FIELDS = {"min_doc_words", "max_doc_words", "min_stop_words", "min_num_sentences"}
# Ratios that are shares (config type Fraction): a proposal stays within [0, 1].
_NOT_FRACTIONS = {"min_avg_word_length", "max_avg_word_length", "max_symbol_word_ratio", *INTEGER_FIELDS}


@dataclass(frozen=True)
class RuleProposal:
    reason: str
    metric: str
    drop_if: str
    current: float | None
    proposed: float | None
    corpus_drop_current: float  # share of corpus documents the threshold drops
    corpus_drop_proposed: float
    reference_drop_current: float | None  # None without a reference
    reference_drop_proposed: float | None


@dataclass
class Proposal:
    rules: list[RuleProposal]
    n_corpus: int
    n_reference: int
    settings: dict[str, Any] = field(default_factory=dict)  # tail, margin, shards, reference dir

    @property
    def id(self) -> str:
        """Named by its thresholds: the same proposal twice is the same file."""
        blob = json.dumps(self.thresholds(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def thresholds(self) -> dict[str, float | None]:
        return {r.reason: r.proposed for r in self.rules if r.reason in FIELDS or _NGRAM.fullmatch(r.reason)}

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "n_corpus": self.n_corpus, "n_reference": self.n_reference,
                "settings": self.settings, "rules": [asdict(r) for r in self.rules]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Proposal:
        return cls([RuleProposal(**r) for r in data["rules"]], data["n_corpus"], data["n_reference"],
                   dict(data.get("settings", {})))


def _drop_share(spec: RuleSpec, threshold: float | None, values: np.ndarray) -> float:
    if not len(values):
        return 0.0
    return sum(fails(spec.drop_if, threshold, float(v)) for v in values) / len(values)  # type: ignore[arg-type]


def _propose_one(spec: RuleSpec, corpus: np.ndarray, reference: np.ndarray | None,
                 tail: float, margin: float) -> float | None:
    finite = corpus[np.isfinite(corpus)]
    if spec.drop_if == "flag" or not len(finite):
        return spec.threshold
    below = spec.drop_if == "below"
    proposal = float(np.quantile(finite, tail if below else 1 - tail))
    ref = reference[np.isfinite(reference)] if reference is not None else np.empty(0)
    if len(ref):
        # beyond the reference's most extreme value, by `margin` of that value
        bound = float(ref.min()) * (1 - margin) if below else float(ref.max()) * (1 + margin)
        proposal = min(proposal, bound) if below else max(proposal, bound)
    name = FIELDS.get(spec.reason, ("", ""))[1]
    if name in INTEGER_FIELDS:
        proposal = math.floor(proposal) if below else math.ceil(proposal)
    elif name not in _NOT_FRACTIONS:
        proposal = min(max(proposal, 0.0), 1.0)
    return float(round(proposal, 4) if name not in INTEGER_FIELDS else proposal)


def propose(specs: Sequence[RuleSpec], corpus: Mapping[str, Sequence[float]],
            reference: Mapping[str, Sequence[float]] | None = None, tail: float = 0.02,
            margin: float = 0.05, settings: Mapping[str, Any] | None = None) -> Proposal:
    """A threshold per rule of `specs` that has a metric column in `corpus` (see the module
    docstring); the rules keep their order."""
    rules: list[RuleProposal] = []
    n_corpus = n_ref = 0
    for spec in specs:
        if spec.reason not in corpus:
            continue
        c = np.asarray(corpus[spec.reason], dtype=float)
        r = np.asarray(reference[spec.reason], dtype=float) if reference and spec.reason in reference else None
        n_corpus, n_ref = len(c), len(r) if r is not None else n_ref
        proposed = _propose_one(spec, c, r, tail, margin)
        rules.append(RuleProposal(
            spec.reason, spec.metric, spec.drop_if, spec.threshold, proposed,
            _drop_share(spec, spec.threshold, c), _drop_share(spec, proposed, c),
            None if r is None else _drop_share(spec, spec.threshold, r),
            None if r is None else _drop_share(spec, proposed, r),
        ))  # fmt: skip
    return Proposal(rules, n_corpus, n_ref, {"tail": tail, "margin": margin, **(settings or {})})


def apply_thresholds(cfg: FilterConfig, thresholds: Mapping[str, float | None]) -> FilterConfig:
    """A copy of `cfg` with the thresholds (reason -> value) written into their fields.
    Two rules sharing a field (hash and ellipsis ratios) get the looser of the two."""
    tree = json.loads(json.dumps(asdict(cfg)))
    shared: dict[tuple[str, str], float] = {}
    for reason, value in thresholds.items():
        if value is None:
            continue
        if m := _NGRAM.fullmatch(reason):
            kind, n = m.group(1), int(m.group(2))
            for pair in tree["gopher_repetition"][f"{kind}_n_grams"]:
                if pair[0] == n:
                    pair[1] = value
            continue
        if reason not in FIELDS:
            raise KeyError(f"no config field for rule {reason!r}")
        section, name = FIELDS[reason]
        key = (section, name)
        value = max(value, shared[key]) if key in shared else value
        shared[key] = value
        tree[section][name] = int(value) if name in INTEGER_FIELDS else value
    return FilterConfig(**tree)

