"""Quality filters: ours (`pipelines.filters`) against datatrove's, in one process.

    python -m bench.bench_filters [--input GLOB] [--limit N] [--repeat R]

Both sides get the same thresholds (our config defaults), the same Spanish stop words and
the same tokenizer, and run in the same order (Gopher repetition, Gopher quality, C4,
FineWeb: FineWeb's pipeline), first drop wins. datatrove's filters are called through
`.filter(doc)` per Document, without an executor, so only filter logic is timed. Timings
are warm: a warm-up pass runs first, imports and setup are excluded, best of R repeats.

Printed: docs/s of the whole chain and of each filter alone (each filter on the input
text), kept counts, and decision agreement (share of documents with the same keep/drop;
for the chain also the same reason and, when kept, the same output text).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.common import default_glob, load_texts
from pipelines.config import FilterConfig
from pipelines.filters import C4, FineWeb, GopherQuality, GopherRepetition, QualityFilters
from pipelines.filters.stopwords import stop_words
from pipelines.filters.text import TextView, sentence_spans, tokenize

# datatrove's reason strings -> ours, to compare why documents were dropped.
_DT_REASONS = {
    "gopher_short_doc": "gopher_quality:min_doc_words",
    "gopher_long_doc": "gopher_quality:max_doc_words",
    "gopher_below_avg_threshold": "gopher_quality:min_avg_word_length",
    "gopher_above_avg_threshold": "gopher_quality:max_avg_word_length",
    "gopher_too_many_hashes": "gopher_quality:hash_word_ratio",
    "gopher_too_many_ellipsis": "gopher_quality:ellipsis_word_ratio",
    "gopher_too_many_bullets": "gopher_quality:bullet_lines_ratio",
    "gopher_too_many_end_ellipsis": "gopher_quality:ellipsis_lines_ratio",
    "gopher_below_alpha_threshold": "gopher_quality:alpha_words_ratio",
    "gopher_enough_stop_words": "gopher_quality:min_stop_words",
    "lorem_ipsum": "c4:lorem_ipsum",
    "curly_bracket": "c4:curly_bracket",
    "too_few_sentences": "c4:too_few_sentences",
    "line_punct_ratio": "fineweb:line_punct_ratio",
    "short_line_ratio": "fineweb:short_line_ratio",
    "char_dup_ratio": "fineweb:char_dup_ratio",
    "list_ratio": "fineweb:new_line_ratio",
}
_DT_REP = {"empty": "empty", "dup_para_frac": "dup_para_frac", "dup_line_frac": "dup_line_frac",
           "dup_para_char_frac": "dup_para_char_frac", "dup_line_char_frac": "dup_line_char_frac"}  # fmt: skip
FILTERS = ("gopher_repetition", "gopher_quality", "c4", "fineweb")


def _dt_reason(filter_name: str, reason: str | None) -> str | None:
    if reason is None:
        return None
    if filter_name == "gopher_repetition":
        if reason.startswith("top_"):
            return f"gopher_repetition:{reason}"
        if reason.startswith("duplicated_"):  # duplicated_5_n_grams
            return f"gopher_repetition:dup_{reason.split('_')[1]}_gram"
        return f"gopher_repetition:{_DT_REP.get(reason, reason)}"
    if filter_name == "fineweb" and reason == "empty":
        return "fineweb:empty"
    return _DT_REASONS.get(reason, f"{filter_name}:{reason}")


def build_datatrove(cfg: FilterConfig) -> dict[str, Any]:
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SameTokenizer(WordTokenizer):
        """datatrove resolves "es" to spaCy's Spanish tokenizer, and spaCy is not installed
        (nor a dependency of ours). Both sides must see the same words for the comparison
        to measure filter logic, so datatrove gets our tokenizer and sentence splitter.
        datatrove accepts a WordTokenizer instance wherever it takes a language."""

        def word_tokenize(self, text: str) -> list[str]:
            return tokenize(text)

        def sent_tokenize(self, text: str) -> list[str]:
            return [text[a:b] for a, b in sentence_spans(text)]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return sentence_spans(text)

    tok = SameTokenizer("es")
    # Our config fields carry datatrove's keyword names (plus `enabled`), so the mapping
    # is derived: a knob added to the config reaches both sides.
    def kw(section) -> dict:
        return {k: v for k, v in dataclasses.asdict(section).items() if k != "enabled"} | {"language": tok}

    rep = kw(cfg.gopher_repetition)
    rep["top_n_grams"] = tuple((int(n), x) for n, x in rep["top_n_grams"])
    rep["dup_n_grams"] = tuple((int(n), x) for n, x in rep["dup_n_grams"])
    return {
        "gopher_repetition": GopherRepetitionFilter(**rep),
        "gopher_quality": GopherQualityFilter(**kw(cfg.gopher_quality), stop_words=sorted(stop_words(cfg.language))),
        "c4": C4QualityFilter(**kw(cfg.c4)),  # filter_no_terminal_punct=False, as in FineWeb
        "fineweb": FineWebQualityFilter(**kw(cfg.fineweb)),
    }


def _split(res: Any) -> tuple[bool, str | None]:
    return (res[0], res[1]) if isinstance(res, tuple) else (bool(res), None)


Outcome = tuple[bool, str | None, str]  # keep, reason (ours), text after the chain


def run_datatrove_chain(
    filters: dict[str, Any], texts: list[str], names: tuple[str, ...] = FILTERS
) -> tuple[list[Outcome], float]:
    """datatrove's filters `names`, in our order, on fresh Documents; (outcomes, seconds)."""
    from datatrove.data import Document

    chain = [(name, filters[name]) for name in FILTERS if name in names]
    docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]  # setup, not timed
    out: list[Outcome] = []
    t0 = time.perf_counter()
    for doc in docs:
        for name, f in chain:
            keep, reason = _split(f.filter(doc))
            if not keep:
                out.append((False, _dt_reason(name, reason), doc.text))
                break
        else:
            out.append((True, None, doc.text))
    return out, time.perf_counter() - t0


def run_ours_chain(qf: QualityFilters, texts: list[str]) -> tuple[list[Outcome], float]:
    t0 = time.perf_counter()
    outs = qf.apply_many(texts)
    elapsed = time.perf_counter() - t0
    return [(o.keep, o.reason, o.text) for o in outs], elapsed


def single_filters(cfg: FilterConfig) -> dict[str, Callable[[str], tuple[bool, str | None]]]:
    """Each of our filters alone, on a fresh view (so each pays for its own splitting)."""
    rep = GopherRepetition(cfg.gopher_repetition)
    qual = GopherQuality(cfg.gopher_quality, stop_words(cfg.language))
    c4 = C4(cfg.c4)
    fw = FineWeb(cfg.fineweb)
    return {
        "gopher_repetition": lambda t: rep.filter(TextView(t)),
        "gopher_quality": lambda t: qual.filter(TextView(t)),
        "c4": lambda t: c4.filter(TextView(t))[:2],
        "fineweb": lambda t: fw.filter(TextView(t)),
    }


def time_single(fn: Callable[[Any], Any], items: list[Any], repeat: int) -> tuple[float, list[Any]]:
    best, res = float("inf"), []
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = [fn(x) for x in items]
        best = min(best, time.perf_counter() - t0)
    return best, res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--input", default=default_glob("clean_documents"), help="parquet glob (doc_id, text)"
    )
    ap.add_argument("--limit", type=int, default=None, help="first N documents only")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats, best is reported")
    ap.add_argument("--no-single", action="store_true", help="skip the per-filter timings")
    args = ap.parse_args(argv)

    _, texts = load_texts(args.input, args.limit)
    texts = [t or "" for t in texts]
    n_chars = sum(map(len, texts))
    print(f"{len(texts)} documents, {n_chars / 1e6:.1f} M characters from {args.input}")

    cfg = FilterConfig()
    ours = QualityFilters(cfg)
    dt = build_datatrove(cfg)
    from datatrove.data import Document

    # Warm-up: first calls import lazily, compile regexes, fill caches.
    warm = texts[: min(200, len(texts))]
    run_ours_chain(ours, warm)
    run_datatrove_chain(dt, warm)

    # Alternate the two sides so that load from elsewhere on the machine hits both alike.
    t_ours = t_dt = float("inf")
    res_ours: list[Outcome] = []
    res_dt: list[Outcome] = []
    for _ in range(args.repeat):
        res_ours, t = run_ours_chain(ours, texts)
        t_ours = min(t_ours, t)
        res_dt, t = run_datatrove_chain(dt, texts)
        t_dt = min(t_dt, t)

    rows = []
    n = len(texts)
    same_keep = sum(a[0] == b[0] for a, b in zip(res_ours, res_dt))
    same_reason = sum(a[1] == b[1] for a, b in zip(res_ours, res_dt))
    same_text = sum(a[2] == b[2] for a, b in zip(res_ours, res_dt) if a[0] and b[0])
    both_kept = sum(a[0] and b[0] for a, b in zip(res_ours, res_dt))
    rows.append(("chain (all four)", n / t_ours, n / t_dt, sum(r[0] for r in res_ours),
                 sum(r[0] for r in res_dt), same_keep / n, same_reason / n))  # fmt: skip

    disagreements: Counter[tuple[str | None, str | None]] = Counter(
        (a[1], b[1]) for a, b in zip(res_ours, res_dt) if a[1] != b[1]
    )

    if not args.no_single:
        singles = single_filters(cfg)
        for name in FILTERS:
            t_o, r_o = time_single(singles[name], texts, args.repeat)
            f = dt[name]
            t_d, r_d = float("inf"), []
            for _ in range(args.repeat):
                docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]  # C4 edits docs
                t0 = time.perf_counter()
                r_d = [_split(f.filter(d)) for d in docs]
                t_d = min(t_d, time.perf_counter() - t0)
            agree = sum(a[0] == b[0] for a, b in zip(r_o, r_d)) / n
            agree_reason = sum(a[1] == _dt_reason(name, b[1]) for a, b in zip(r_o, r_d)) / n
            rows.append((name, n / t_o, n / t_d, sum(r[0] for r in r_o), sum(r[0] for r in r_d),
                         agree, agree_reason))  # fmt: skip

    print()
    head = f"{'filter':<18} {'ours docs/s':>12} {'dt docs/s':>10} {'ratio':>6} "
    head += f"{'kept ours':>9} {'kept dt':>8} {'agree':>7} {'reason':>7}"
    print(head)
    print("-" * len(head))
    for name, d_o, d_d, k_o, k_d, agree, agree_r in rows:
        print(f"{name:<18} {d_o:>12,.0f} {d_d:>10,.0f} {d_o / d_d:>5.2f}x "
              f"{k_o:>9} {k_d:>8} {agree:>7.2%} {agree_r:>7.2%}")  # fmt: skip
    print(f"\nchain: {n_chars / t_ours / 1e6:.1f} vs {n_chars / t_dt / 1e6:.1f} M chars/s; "
          f"kept texts identical: {same_text}/{both_kept}")  # fmt: skip
    if disagreements:
        print("chain reason disagreements (ours, datatrove): count")
        for (a, b), k in disagreements.most_common(10):
            print(f"  {a} / {b}: {k}")


if __name__ == "__main__":
    main()
