"""Personal data: our redactor (`pipelines.data.pii`) against Microsoft Presidio's pattern
recognizers and datatrove's `PIIFormatter`, on the same planted corpus, in one process.

    python -m bench.bench_pii [--language es,fr] [--docs N] [--rounds R] [--per-page K]
        [--seed S] [--threshold T] [--show N] [--check-offline]

The held-out GIMP pages carry K valid values and K look-alikes each (bench.pii_corpus);
each side runs at its strongest, offline, and is scored from its spans: recall, precision,
look-alikes intact, values leaked; speed in R interleaved rounds. --check-offline fails if
anything reached the network. docs/benchmarks.md#personal-data.
"""

from __future__ import annotations

import argparse
import itertools
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import guard_sockets, interleaved, say_offline

# Presidio's entity types for the recognizers below -> our kinds.
PRESIDIO_KINDS = {
    "EMAIL_ADDRESS": "email",
    "PHONE_NUMBER": "phone",
    "IBAN_CODE": "iban",
    "CREDIT_CARD": "card",
    "IP_ADDRESS": "ip_address",
    "US_SSN": "national_id",
    "ES_NIF": "national_id",
    "ES_NIE": "national_id",
    "IT_FISCAL_CODE": "national_id",
}


@dataclass(frozen=True)
class Flag:
    """One flagged span on the input text, labelled with our kind (`score`: Presidio's)."""

    kind: str
    start: int
    end: int
    score: float = 1.0


# --- the sides ---------------------------------------------------------------------------


def offline_tldextract() -> None:
    """Presidio's EmailRecognizer validates with `tldextract.extract`, whose module-level
    extractor fetches the public suffix list over HTTP on first use (then caches it in
    ~/.cache). Replace it with one that reads the snapshot bundled in the wheel and
    writes no cache, before anything calls it."""
    os.environ["TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS"] = ""  # any extractor built later: no URLs
    import tldextract
    import tldextract.tldextract as module

    module.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                                 fallback_to_snapshot=True)


def presidio_recognizers(language: str, regions: Sequence[str]) -> list[Any]:
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        EsNieRecognizer,
        EsNifRecognizer,
        IbanRecognizer,
        IpRecognizer,
        ItFiscalCodeRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    lang = {"supported_language": language}
    return [EmailRecognizer(**lang), PhoneRecognizer(supported_regions=tuple(regions), **lang),
            IbanRecognizer(**lang), CreditCardRecognizer(**lang), IpRecognizer(**lang),
            UsSsnRecognizer(**lang), EsNifRecognizer(**lang), EsNieRecognizer(**lang),
            ItFiscalCodeRecognizer(**lang)]


def presidio_find(recognizers: Sequence[Any], text: str) -> list[Flag]:
    out: list[Flag] = []
    for rec in recognizers:
        for r in rec.analyze(text, rec.supported_entities, None):
            out.append(Flag(PRESIDIO_KINDS[r.entity_type], r.start, r.end, r.score))
    return out


def replace_spans(text: str, flags: Iterable[Flag], label: Callable[[Flag], str]) -> str:
    """`text` with the union of the spans replaced, each merged run by the label of its
    first span (what presidio-anonymizer's `replace` operator does)."""
    parts: list[str] = []
    pos = 0
    for f in sorted(flags, key=lambda f: (f.start, -f.end)):
        if f.end <= pos:
            continue
        if f.start >= pos:
            parts += [text[pos:f.start], label(f)]
        pos = max(pos, f.end)
    parts.append(text[pos:])
    return "".join(parts)


def presidio_redact(recognizers: Sequence[Any], text: str) -> str:
    inverse = {v: k for k, v in reversed(PRESIDIO_KINDS.items())}
    return replace_spans(text, presidio_find(recognizers, text), lambda f: f"<{inverse[f.kind]}>")


def datatrove_find(formatter: Any, text: str) -> list[Flag]:
    """Where `formatter.format(text)` replaces: its email regex on the input, then its IP
    regex and validator, as `format` runs them, on the text outside the emails."""
    emails = [Flag("email", m.start(), m.end()) for m in formatter.emails_replacer.regex.finditer(text)]
    ips: list[Flag] = []
    pos = 0
    validator = formatter.ip_replacer.validator
    # The IP pass runs on the text after the email pass; the replacement addresses hold no
    # IPv4 address, so it sees the same characters between the emails.
    for start, end in [(e.start, e.end) for e in emails] + [(len(text), len(text))]:
        for m in formatter.ip_replacer.regex.finditer(text, pos, start):
            if validator is None or validator(m.group(0)):
                ips.append(Flag("ip_address", m.start(), m.end()))
        pos = end
    return emails + ips


def datatrove_replay_ok(formatter: Any, text: str) -> bool:
    """Whether `datatrove_find`'s spans, filled with datatrove's replacements in order,
    give exactly `formatter.format(text)`."""
    formatter.emails_replacer._replace_i = formatter.ip_replacer._replace_i = 0
    real = formatter.format(text)
    cycle = {"email": itertools.cycle(formatter.emails_replacer.replacements),
             "ip_address": itertools.cycle(formatter.ip_replacer.replacements)}
    flags = sorted(datatrove_find(formatter, text), key=lambda f: f.start)
    # Replacements are taken in each regex's own left-to-right order, as `sub` does.
    fill = {f: next(cycle[f.kind]) for f in sorted(flags, key=lambda f: (f.kind != "email", f.start))}
    formatter.emails_replacer._replace_i = formatter.ip_replacer._replace_i = 0
    return replace_spans(text, flags, lambda f: fill[f]) == real


# --- the corpus --------------------------------------------------------------------------


def planted_corpus(language: str, docs: int, per_page: int, seed: int) -> list[Any]:
    from bench.pii_corpus import held_out_texts, plant

    pages = list(held_out_texts(language))
    out: list[Any] = []
    rnd = 0
    while len(out) < docs:
        take = pages[: docs - len(out)]
        out += plant(take, language, seed=seed + rnd, per_page=per_page)
        rnd += 1
    return out


# --- scoring -----------------------------------------------------------------------------


def places(text: str, value: str) -> list[tuple[int, int]]:
    out, i = [], text.find(value)
    while i >= 0 and value:
        out.append((i, i + len(value)))
        i = text.find(value, i + 1)
    return out


def merged(flags: Iterable[Flag]) -> list[Flag]:
    """Overlapping or touching spans of one label as one span (several recognizers or
    patterns finding the same number are one finding)."""
    out: list[Flag] = []
    for f in sorted(flags, key=lambda f: (f.kind, f.start, f.end)):
        if out and out[-1].kind == f.kind and f.start <= out[-1].end:
            last = out[-1]
            out[-1] = Flag(f.kind, last.start, max(last.end, f.end), max(last.score, f.score))
        else:
            out.append(f)
    return out


@dataclass
class Score:
    """Counts for one side over a corpus; ratios come from them."""

    planted: Counter[str] = field(default_factory=Counter)
    caught: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)  # merged spans, by their label's kind
    true_flags: Counter[str] = field(default_factory=Counter)
    on_lookalike: Counter[str] = field(default_factory=Counter)
    lookalikes: int = 0
    lookalikes_intact: int = 0
    missing: int = 0  # planted values not found written in the text (a corpus error)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def recall(self, kind: str | None = None) -> float | None:
        p = self.planted[kind] if kind else sum(self.planted.values())
        c = self.caught[kind] if kind else sum(self.caught.values())
        return c / p if p else None

    def precision(self, kind: str | None = None) -> float | None:
        n = self.flags[kind] if kind else sum(self.flags.values())
        t = self.true_flags[kind] if kind else sum(self.true_flags.values())
        return t / n if n else None


def score_doc(s: Score, doc: Any, flags: list[Flag], show: int) -> None:
    text = doc.text
    mask = bytearray(len(text))
    spans = merged(flags)
    for f in spans:
        mask[f.start:f.end] = b"\x01" * (f.end - f.start)
    planted: list[tuple[int, int]] = []
    for kind, value in doc.values:
        where = places(text, value)
        if not where:
            s.missing += 1
            continue
        planted += where
        s.planted[kind] += 1
        if all(mask[i] for a, b in where for i in range(a, b) if text[i].isalnum()):
            s.caught[kind] += 1
        elif len(s.examples[f"missed {kind}"]) < show:
            s.examples[f"missed {kind}"].append(value)
    looks: list[tuple[int, int]] = []
    for value in doc.lookalikes:
        where = [(a, b) for a, b in places(text, value) if not any(a < d and c < b for c, d in planted)]
        if not where:
            continue
        looks += where
        s.lookalikes += 1
        if not any(mask[a:b].count(1) for a, b in where):
            s.lookalikes_intact += 1
    for f in spans:
        s.flags[f.kind] += 1
        if any(f.start < b and a < f.end for a, b in planted):
            s.true_flags[f.kind] += 1
            continue
        on_look = any(f.start < b and a < f.end for a, b in looks)
        s.on_lookalike[f.kind] += on_look
        key = f"false {f.kind} ({'look-alike' if on_look else 'carrier text'})"
        if len(s.examples[key]) < show:
            s.examples[key].append(text[max(0, f.start - 20):f.end + 20].replace("\n", " "))


def leaked(docs: Sequence[Any], outputs: Sequence[str]) -> int:
    return sum(value in out for doc, out in zip(docs, outputs) for _, value in doc.values)


# --- printing ----------------------------------------------------------------------------


def _f(x: float | None) -> str:
    return "    -" if x is None else f"{x:5.3f}"


def print_scores(kinds: Sequence[str], scores: dict[str, Score]) -> None:
    names = list(scores)
    head = f"{'kind':<12}{'planted':>8}" + "".join(f" | {n:>13} R     P" for n in names)
    print(head)
    print("-" * len(head))
    any_side = next(iter(scores.values()))
    for kind in [*kinds, None]:
        label = kind or "all"
        cells = "".join(f" | {_f(s.recall(kind)):>15} {_f(s.precision(kind))}" for s in scores.values())
        planted = any_side.planted[kind] if kind else sum(any_side.planted.values())
        print(f"{label:<12}{planted:>8}{cells}")
    print("(R: planted values whose every letter and digit a span covers; P: the side's spans "
          "of that kind that overlap a planted value; -: no planted value / no span)")
    print("look-alikes intact: " + ", ".join(
        f"{n} {s.lookalikes_intact}/{s.lookalikes} ({s.lookalikes_intact / max(s.lookalikes, 1):.1%})"
        for n, s in scores.items()))
    for n, s in scores.items():
        flagged = sum(s.flags.values())
        wrong = flagged - sum(s.true_flags.values())
        look = sum(s.on_lookalike.values())
        by_kind = ", ".join(f"{k} {s.flags[k] - s.true_flags[k]}" for k in kinds if s.flags[k] - s.true_flags[k])
        print(f"  {n}: {flagged} spans, {wrong} false ({look} on look-alikes, {wrong - look} on "
              f"carrier text){': ' + by_kind if by_kind else ''}")


def losses(language: str, kinds: Sequence[str], scores: dict[str, Score]) -> list[str]:
    """One line per (kind, peer, measure) where a peer beats ours, and per peer that leaves
    more look-alikes intact."""
    ours = scores["ours"]
    out: list[str] = []
    for kind in kinds:
        for peer, s in scores.items():
            if peer == "ours":
                continue
            for what, get in (("recall", Score.recall), ("precision", Score.precision)):
                mine, theirs = get(ours, kind), get(s, kind)
                if theirs is None:
                    continue
                if mine is None:
                    if what == "precision" and theirs > 0:
                        out.append(f"{language} {kind}: {peer} {what} {theirs:.3f}, ours flagged nothing")
                elif theirs > mine:
                    out.append(f"{language} {kind}: {peer} {what} {theirs:.3f} > ours {mine:.3f}")
    share = {n: s.lookalikes_intact / max(s.lookalikes, 1) for n, s in scores.items()}
    out += [f"{language} look-alikes intact: {peer} {share[peer]:.1%} > ours {share['ours']:.1%}"
            for peer in scores if peer != "ours" and share[peer] > share["ours"]]
    return out


# --- main --------------------------------------------------------------------------------


def run_language(language: str, args: argparse.Namespace) -> list[str]:
    from datatrove.pipeline.formatters import PIIFormatter

    from pipelines.config import PiiConfig
    from pipelines.data.pii import KINDS as ALL_KINDS
    from pipelines.data.pii import Redactor

    KINDS = tuple(k for k in ALL_KINDS if k != "person")  # names are a model's, off here and never planted

    docs = planted_corpus(language, args.docs, args.per_page, args.seed)
    texts = [d.text for d in docs]
    n, chars = len(texts), sum(map(len, texts))
    redactor = Redactor(PiiConfig(), language=language)
    regions = list(redactor.regions)  # the phone regions ours reads, handed to Presidio too
    recognizers = presidio_recognizers(language, regions)
    formatter = PIIFormatter()
    print(f"\n== {language}: {n} documents ({chars / 1e6:.2f} M characters), "
          f"{sum(len(d.values) for d in docs)} planted values, {sum(len(d.lookalikes) for d in docs)} "
          f"look-alikes; Presidio phone regions {','.join(regions)}")

    # Spans, untimed; then the timed calls, whose outputs are checked for leaks.
    threshold = f"presidio>={args.threshold:g}"
    scores = {name: Score() for name in ("ours", "presidio", threshold, "datatrove")}
    p_flags: list[list[Flag]] = []
    for doc in docs:
        score_doc(scores["ours"], doc, [Flag(f.kind, f.start, f.end) for f in redactor.find(doc.text)], args.show)
        pf = presidio_find(recognizers, doc.text)
        p_flags.append(pf)
        score_doc(scores["presidio"], doc, pf, args.show)
        score_doc(scores[threshold], doc, [f for f in pf if f.score >= args.threshold], args.show)
        score_doc(scores["datatrove"], doc, datatrove_find(formatter, doc.text), args.show)
    replay = sum(datatrove_replay_ok(formatter, t) for t in texts)

    cases = {"ours": lambda: [redactor.redact(t).text for t in texts],
             "presidio": lambda: [presidio_redact(recognizers, t) for t in texts],
             "datatrove": lambda: [formatter.format(t) for t in texts]}
    rounds = interleaved(cases, args.rounds)
    outputs = dict(rounds.last)
    inverse = {v: k for k, v in reversed(PRESIDIO_KINDS.items())}
    outputs[threshold] = [
        replace_spans(t, [f for f in pf if f.score >= args.threshold], lambda f: f"<{inverse[f.kind]}>")
        for t, pf in zip(texts, p_flags)
    ]

    print()
    print_scores(KINDS, scores)
    planted = sum(scores["ours"].planted.values())
    print("leaked verbatim in the output: " + ", ".join(
        f"{name} {leaked(docs, outputs[name])}/{planted}" for name in scores))
    print(f"datatrove's spans replayed give its output exactly on {replay}/{n} documents")
    if scores["ours"].missing:
        print(f"WARNING: {scores['ours'].missing} planted values are not written verbatim in their document")
    if args.show:
        for name, s in scores.items():
            for key, ex in sorted(s.examples.items()):
                print(f"  {name} {key}: " + " | ".join(repr(e) for e in ex))

    rounds.report("presidio", "docs/s", work=n, compare=[],
                  title=f"\n{language}, seconds per round over {n} documents (in the order they ran):")
    for peer in ("presidio", "datatrove"):
        rounds.versus("ours", peer)
    lost = losses(language, KINDS, scores)
    for peer in ("presidio", "datatrove"):
        if rounds.ratio("ours", peer).median < 1:
            lost.append(f"{language} speed: ours slower than {peer} "
                        f"({rounds.ratio('ours', peer).fmt()})")
    return lost


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--language", default="es,fr", help="comma-separated: es, fr (the carriers there are)")
    ap.add_argument("--docs", type=int, default=300, help="planted documents per language")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--per-page", type=int, default=3, help="values planted per document")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threshold", type=float, default=0.5, help="the second Presidio row's minimum score")
    ap.add_argument("--show", type=int, default=0, help="print up to N missed values and false spans per side")
    ap.add_argument("--check-offline", action="store_true",
                    help="fail if anything tries to reach the network (an audit hook on sockets)")
    args = ap.parse_args(argv)

    attempts: list[dict] = []
    if args.check_offline:
        guard_sockets(attempts.append)
    offline_tldextract()

    lost: list[str] = []
    for language in [x.strip() for x in args.language.split(",") if x.strip()]:
        lost += run_language(language, args)

    print("\nwhere a peer beats ours:" if lost else "\nno kind where a peer's recall or precision beats ours")
    for line in lost:
        print(f"  {line}")
    if args.check_offline:
        say_offline(attempts)


if __name__ == "__main__":
    main()
