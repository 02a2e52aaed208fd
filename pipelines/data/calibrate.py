"""Threshold calibration of the quality rules, from measured metric distributions.

As FineWeb-2 did per language, each rule's threshold is proposed from its metric on the
corpus, and optionally on a reference folder of documents the user knows are good, rather
than reused from English. Inputs are metric tables from `QualityFilters.evaluate` (reason ->
one value per document; the columns aligned, ValueError if their lengths differ). `tail`
is ONE drop budget for the whole proposal, counted per document over all rules, not a cut
per rule; rules are tightened only with a reference, and the document-length bounds never
(length is not a quality signal). The rules in full: docs/data.md#quality-filters.
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
from pipelines.data.filters.rules import RuleSpec

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


# Never tightened: document length is not a quality signal (see the module docstring).
LENGTH_FIELDS = {"min_doc_words", "max_doc_words"}


@dataclass(frozen=True)
class RuleProposal:
    reason: str
    metric: str
    drop_if: str
    current: float | None
    proposed: float | None
    corpus_drop_current: float  # share of corpus documents the threshold drops (this rule alone)
    corpus_drop_proposed: float
    reference_drop_current: float | None  # None without a reference
    reference_drop_proposed: float | None


@dataclass
class Proposal:
    rules: list[RuleProposal]
    n_corpus: int
    n_reference: int
    settings: dict[str, Any] = field(default_factory=dict)  # tail, margin, shards, reference dir
    # share of corpus documents all the rules together drop (a document counted once);
    # None in proposals saved before it was recorded
    corpus_drop_current: float | None = None
    corpus_drop_proposed: float | None = None

    @property
    def id(self) -> str:
        """Named by its thresholds: the same proposal twice is the same file."""
        blob = json.dumps(self.thresholds(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def thresholds(self) -> dict[str, float | None]:
        return {r.reason: r.proposed for r in self.rules if _field(r.reason)}

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "n_corpus": self.n_corpus, "n_reference": self.n_reference,
                "settings": self.settings, "corpus_drop_current": self.corpus_drop_current,
                "corpus_drop_proposed": self.corpus_drop_proposed, "rules": [asdict(r) for r in self.rules]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Proposal:
        return cls([RuleProposal(**r) for r in data["rules"]], data["n_corpus"], data["n_reference"],
                   dict(data.get("settings", {})), data.get("corpus_drop_current"),
                   data.get("corpus_drop_proposed"))


def _field(reason: str) -> str | None:
    """The config field a rule's threshold lives in (None: the proposal cannot move it)."""
    if reason in FIELDS:
        return FIELDS[reason][1]
    return "n_grams" if _NGRAM.fullmatch(reason) else None


def _fails(drop_if: str, threshold: float | None, values: np.ndarray) -> np.ndarray:
    """`fails` over a column: which documents the threshold drops (NaN drops nothing)."""
    if threshold is None:
        return np.zeros(len(values), dtype=bool)
    with np.errstate(invalid="ignore"):
        if drop_if == "below":
            return values < threshold
        return values > threshold if drop_if == "above" else values >= threshold


def _drop_share(spec: RuleSpec, threshold: float | None, values: np.ndarray) -> float:
    return float(_fails(spec.drop_if, threshold, values).mean()) if len(values) else 0.0


def _looser(drop_if: str, a: float, b: float) -> float:
    return min(a, b) if drop_if == "below" else max(a, b)


def _tighter(drop_if: str, a: float, b: float) -> bool:
    """Whether threshold `a` drops more than `b` would (on the rule's side)."""
    return a > b if drop_if == "below" else a < b


def _keep_round(drop_if: str, name: str, value: float) -> float:
    """Integer rules to a whole number, fractions into [0, 1] and to 4 decimals, always
    rounding towards keeping."""
    below = drop_if == "below"
    if name in INTEGER_FIELDS:
        return float(math.floor(value) if below else math.ceil(value))
    if name not in _NOT_FRACTIONS:
        value = min(max(value, 0.0), 1.0)
    r = round(value, 4)
    if below and r > value:
        r = round(r - 1e-4, 4)
    elif not below and r < value:
        r = round(r + 1e-4, 4)
    return float(r)


def _candidate(spec: RuleSpec, name: str, finite: np.ndarray, ref: np.ndarray, tail: float,
               margin: float) -> float:
    """The corpus tail cut (the tightest threshold at which the rule alone drops at most
    `tail` of the corpus), moved beyond the reference's most extreme value by `margin`."""
    below = spec.drop_if == "below"
    ordered = np.sort(finite)
    k = len(ordered) - 1
    cut = float(ordered[math.floor(tail * k)] if below else ordered[math.ceil((1 - tail) * k)])
    if len(ref):
        bound = float(ref.min()) * (1 - margin) if below else float(ref.max()) * (1 + margin)
        cut = min(cut, bound) if below else max(cut, bound)
    return _keep_round(spec.drop_if, name, cut)


def _aligned(table: Mapping[str, np.ndarray], what: str) -> int:
    lengths = {len(v) for v in table.values()}
    if len(lengths) > 1:
        raise ValueError(f"{what} metric columns differ in length ({sorted(lengths)}): "
                         f"they must hold one value per document, in the same order")
    return lengths.pop() if lengths else 0


def _union(masks: Sequence[np.ndarray], n: int) -> np.ndarray:
    return np.logical_or.reduce(list(masks)) if masks else np.zeros(n, dtype=bool)


def propose(specs: Sequence[RuleSpec], corpus: Mapping[str, Sequence[float]],
            reference: Mapping[str, Sequence[float]] | None = None, tail: float = 0.02,
            margin: float = 0.05, settings: Mapping[str, Any] | None = None) -> Proposal:
    """A threshold per rule of `specs` that has a metric column in `corpus` (see the module
    docstring: `tail` is the budget of the whole proposal); the rules keep their order.
    The columns of `corpus`, and of `reference`, must be aligned per document."""
    specs = [s for s in specs if s.reason in corpus]
    cols = {s.reason: np.asarray(corpus[s.reason], dtype=float) for s in specs}
    n = _aligned(cols, "corpus")
    refs = {s.reason: np.asarray(reference[s.reason], dtype=float) for s in specs
            if reference and s.reason in reference}
    n_ref = _aligned(refs, "reference")
    proposed: dict[str, float | None] = {}  # loosened or kept, then tightened below
    targets: dict[str, float] = {}  # tightenings the reference supports
    for s in specs:
        c, cur, name = cols[s.reason], s.threshold, _field(s.reason)
        proposed[s.reason] = cur
        finite = c[np.isfinite(c)]
        if s.drop_if == "flag" or cur is None or name is None or not len(finite):
            continue
        ref = refs.get(s.reason, np.empty(0))
        ref = ref[np.isfinite(ref)]
        cand = _candidate(s, name, finite, ref, tail, margin)
        if _drop_share(s, cur, c) > tail or _fails(s.drop_if, cur, ref).any():
            proposed[s.reason] = _looser(s.drop_if, cur, cand)
        elif len(ref) and name not in LENGTH_FIELDS and _tighter(s.drop_if, cand, cur):
            targets[s.reason] = cand
    by = {s.reason: s for s in specs}
    union = _union([_fails(s.drop_if, proposed[s.reason], cols[s.reason]) for s in specs], n)
    limit = max(tail, union.mean() if n else 0.0) * n + 1e-9  # documents the proposal may drop
    pending = {r: _fails(by[r].drop_if, t, cols[r]) for r, t in targets.items()}
    while pending:  # the tightening adding the fewest dropped documents first
        extra = {r: int((m & ~union).sum()) for r, m in pending.items()}
        best = min(extra, key=extra.__getitem__)
        if union.sum() + extra[best] > limit:
            break  # the cheapest does not fit: none does
        union |= pending.pop(best)
        proposed[best] = targets[best]
    shared: dict[tuple[str, str], float] = {}  # one field, two rules: the looser, as applied
    for s in specs:
        value = proposed[s.reason]
        if s.reason in FIELDS and value is not None:
            key = FIELDS[s.reason]
            shared[key] = _looser(s.drop_if, shared.get(key, value), value)
    rules: list[RuleProposal] = []
    for s in specs:
        if s.reason in FIELDS and FIELDS[s.reason] in shared:
            proposed[s.reason] = shared[FIELDS[s.reason]]
        c, r, p = cols[s.reason], refs.get(s.reason), proposed[s.reason]
        rules.append(RuleProposal(
            s.reason, s.metric, s.drop_if, s.threshold, p,
            _drop_share(s, s.threshold, c), _drop_share(s, p, c),
            None if r is None else _drop_share(s, s.threshold, r),
            None if r is None else _drop_share(s, p, r),
        ))  # fmt: skip
    before = _union([_fails(s.drop_if, s.threshold, cols[s.reason]) for s in specs], n)
    after = _union([_fails(s.drop_if, proposed[s.reason], cols[s.reason]) for s in specs], n)
    return Proposal(rules, n, n_ref, {"tail": tail, "margin": margin, **(settings or {})},
                    float(before.mean()) if n else 0.0, float(after.mean()) if n else 0.0)


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

