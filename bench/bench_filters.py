"""Quality filters: ours (`pipelines.data.filters`) against datatrove's, in one process.

    python -m bench.bench_filters [--input GLOB] [--limit N] [--rounds R] [--no-single]

Both sides get the same thresholds, stop words and tokenizer and run in FineWeb's order,
first drop wins; only filter logic is timed, warm, in R interleaved rounds. Printed: the
documents per second of the chain and of each filter alone, kept counts and decision
agreement. Method: docs/benchmarks.md#quality-filters-bench_filters.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.common import Clocked, default_glob, interleaved, load_texts
from pipelines import languages
from pipelines.config import FilterConfig, filter_profile
from pipelines.data.filters import C4, FineWeb, GopherQuality, GopherRepetition, QualityFilters
from pipelines.data.filters.text import TextView, sentence_spans, tokenize

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


def gopher_stop_words(language: str) -> frozenset[str]:
    """The words our Gopher rule counts for `language` (FineWeb-2's published list)."""
    return languages.get(languages.normalise(language)).gopher_stop_words


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
        return {k: v for k, v in dataclasses.asdict(section).items() if k not in ("enabled", "heading_repeats", "heading_max_words", "curly_bracket_scope")} | {"language": tok}

    rep = kw(cfg.gopher_repetition)
    rep["top_n_grams"] = tuple((int(n), x) for n, x in rep["top_n_grams"])
    rep["dup_n_grams"] = tuple((int(n), x) for n, x in rep["dup_n_grams"])
    return {
        "gopher_repetition": GopherRepetitionFilter(**rep),
        "gopher_quality": GopherQualityFilter(**kw(cfg.gopher_quality), stop_words=sorted(gopher_stop_words(cfg.language))),
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
    qual = GopherQuality(cfg.gopher_quality, gopher_stop_words(cfg.language))
    c4 = C4(cfg.c4)
    fw = FineWeb(cfg.fineweb)
    return {
        "gopher_repetition": lambda t: rep.filter(TextView(t)),
        "gopher_quality": lambda t: qual.filter(TextView(t)),
        "c4": lambda t: c4.filter(TextView(t))[:2],
        "fineweb": lambda t: fw.filter(TextView(t)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--input", default=default_glob("clean_documents"), help="parquet glob (doc_id, text)"
    )
    ap.add_argument("--limit", type=int, default=None, help="first N documents only")
    ap.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=5,
                    help="interleaved rounds (ours, datatrove, rotating) per comparison")
    ap.add_argument("--no-single", action="store_true", help="skip the per-filter timings")
    args = ap.parse_args(argv)

    _, texts = load_texts(args.input, args.limit)
    texts = [t or "" for t in texts]
    n_chars = sum(map(len, texts))
    n = len(texts)
    print(f"{n} documents, {n_chars / 1e6:.1f} M characters from {args.input}; {args.rounds} interleaved "
          "rounds per comparison (ratios: datatrove seconds / ours seconds, > 1: ours faster)")

    cfg = filter_profile("web")  # the published thresholds, as datatrove applies them
    ours = QualityFilters(cfg)
    dt = build_datatrove(cfg)
    from datatrove.data import Document

    # Warm-up on a slice (first calls import lazily, compile regexes, fill caches); then
    # each round runs both sides on the whole input, in alternating order, so that a slow
    # spell of the machine hits both alike.
    warm = texts[: min(200, len(texts))]
    run_ours_chain(ours, warm)
    run_datatrove_chain(dt, warm)
    singles = single_filters(cfg)
    for name in FILTERS:
        [singles[name](t) for t in warm]
        [dt[name].filter(Document(text=t, id=str(i))) for i, t in enumerate(warm)]

    def clocked(run: Callable[[], tuple[list[Outcome], float]]) -> Callable[[], Clocked]:
        return lambda: Clocked(*reversed(run()))

    chain = interleaved({"ours": clocked(lambda: run_ours_chain(ours, texts)),
                         "datatrove": clocked(lambda: run_datatrove_chain(dt, texts))}, args.rounds, warmup=0)
    chain.report("datatrove", "docs/s", work=n, title="\nchain (all four):")
    res_ours, res_dt = chain.last["ours"], chain.last["datatrove"]
    same_keep = sum(a[0] == b[0] for a, b in zip(res_ours, res_dt))
    same_reason = sum(a[1] == b[1] for a, b in zip(res_ours, res_dt))
    same_text = sum(a[2] == b[2] for a, b in zip(res_ours, res_dt) if a[0] and b[0])
    both_kept = sum(a[0] and b[0] for a, b in zip(res_ours, res_dt))
    rows = [("chain (all four)", chain, sum(r[0] for r in res_ours), sum(r[0] for r in res_dt),
             same_keep / n, same_reason / n)]  # fmt: skip
    disagreements: Counter[tuple[str | None, str | None]] = Counter(
        (a[1], b[1]) for a, b in zip(res_ours, res_dt) if a[1] != b[1]
    )

    if not args.no_single:
        for name in FILTERS:
            mine, f = singles[name], dt[name]

            def theirs(f: Any = f) -> Clocked:
                docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]  # C4 edits docs; not timed
                t0 = time.perf_counter()
                out = [_split(f.filter(d)) for d in docs]
                return Clocked(time.perf_counter() - t0, out)

            r = interleaved({"ours": lambda mine=mine: [mine(t) for t in texts], "datatrove": theirs},
                            args.rounds, warmup=0)
            r.report("datatrove", "docs/s", work=n, title=f"\n{name} alone:")
            r_o, r_d = r.last["ours"], r.last["datatrove"]
            agree = sum(a[0] == b[0] for a, b in zip(r_o, r_d)) / n
            agree_reason = sum(a[1] == _dt_reason(name, b[1]) for a, b in zip(r_o, r_d)) / n
            rows.append((name, r, sum(r[0] for r in r_o), sum(r[0] for r in r_d), agree, agree_reason))

    print()
    head = f"{'filter':<18} {'ours docs/s':>12} {'dt docs/s':>10} {'ratio':>6} {'range':>11} "
    head += f"{'kept ours':>9} {'kept dt':>8} {'agree':>7} {'reason':>7}"
    print(head)
    print("-" * len(head))
    for name, r, k_o, k_d, agree, agree_r in rows:
        rate = {c: statistics.median(n / t for t in r.seconds(c)) for c in ("ours", "datatrove")}
        ratio = r.ratio("ours", "datatrove")
        print(f"{name:<18} {rate['ours']:>12,.0f} {rate['datatrove']:>10,.0f} {ratio.median:>5.2f}x "
              f"{ratio.lo:>5.2f}-{ratio.hi:<5.2f} {k_o:>9} {k_d:>8} {agree:>7.2%} {agree_r:>7.2%}")  # fmt: skip
    print("(docs/s: median over rounds; ratio: median of the per-round ratios, range: min-max)")
    mc = {c: statistics.median(n_chars / t for t in chain.seconds(c)) / 1e6 for c in ("ours", "datatrove")}
    print(f"\nchain: {mc['ours']:.1f} vs {mc['datatrove']:.1f} M chars/s (medians); "
          f"kept texts identical: {same_text}/{both_kept}")  # fmt: skip
    if disagreements:
        print("chain reason disagreements (ours, datatrove): count")
        for (a, b), k in disagreements.most_common(10):
            print(f"  {a} / {b}: {k}")


if __name__ == "__main__":
    main()
