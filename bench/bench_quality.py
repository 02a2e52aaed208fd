"""The learned quality classifier's scoring loop (`QualityModel.score`) against datatrove's
`FastTextClassifierFilter`, with the same fastText model on the same documents, in one
process.

    python -m bench.bench_quality [--language es] [--docs N] [--rounds R] [--check-offline]

The model is trained on the held-out GIMP pages as quality_model trains; datatrove reads
its very file. Sides: ours, datatrove on our normalised text (like for like) and datatrove
on raw text; scoring speed in R interleaved rounds. How datatrove's filter is built
without `fasteners`: docs/benchmarks.md#learned-quality.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Clocked, Spread, guard_sockets, interleaved, say_offline

LANGUAGES = ("es", "fr")  # the held-out GIMP pages there are
GOOD = "__label__good"


def pages_in_turn(per_language: Sequence[Sequence[str]]) -> list[str]:
    """The pages of each language taken in turn (a1, b1, a2, b2, ...), a language that runs
    out leaving the others to go on: any prefix holds every language."""
    return [p for group in itertools.zip_longest(*per_language) for p in group if p is not None]


def documents(n: int) -> list[str]:
    from bench.pii_corpus import held_out_texts

    pages = pages_in_turn([held_out_texts(lang) for lang in LANGUAGES])
    return [pages[i % len(pages)] for i in range(n)]


def trained_model(language: str) -> tuple[Any, str]:
    """A QualityModel trained as quality_model trains one, and a line saying on what."""
    from bench.pii_corpus import held_out_texts
    from pipelines.config import LearnedQualityConfig
    from pipelines.data.quality import train, training_set

    if language not in LANGUAGES:
        raise SystemExit(f"--language {language}: held-out pages exist for {', '.join(LANGUAGES)} only")
    pages = list(held_out_texts(language))
    foreign = [t for lang in LANGUAGES if lang != language for t in held_out_texts(lang)]
    cfg = LearnedQualityConfig()
    t0 = time.perf_counter()
    model = train(training_set(pages, [], cfg, foreign=foreign), cfg)
    return model, (f"trained on {len(pages)} {language} pages (foreign: {len(foreign)} pages) in "
                   f"{time.perf_counter() - t0:.1f} s; threshold {model.threshold:.3f}, "
                   f"held-out good loss {model.report['heldout_good_loss']:.1%}")


def datatrove_filter(path: Path, threshold: float) -> Any:
    """datatrove's FastTextClassifierFilter on the local file `path` (see the module
    docstring for why it is built without its `fasteners` import check)."""
    from datatrove.pipeline.filters import FastTextClassifierFilter
    from fasttext.FastText import _FastText

    flt = object.__new__(FastTextClassifierFilter)
    flt.__init__(str(path), keep_labels=("good", threshold), newline_replacement=" ",
                 save_labels_in_metadata=True)
    flt._model = _FastText(str(path))
    if GOOD not in flt._model.labels:
        raise SystemExit(f"{path}: the model has no {GOOD} (labels {flt._model.labels})")
    return flt


@dataclass
class Decided:
    """What a side says of each document, in order: P(good) and whether it is kept."""

    scores: np.ndarray
    keep: np.ndarray


def datatrove_case(flt: Any, texts: Sequence[str], prepare: Callable[[str], str] | None) -> Callable[[], Clocked]:
    """One timed call of datatrove's filter over fresh Documents (built off the clock);
    `prepare` rewrites each document's text on the clock first."""
    from datatrove.data import Document

    def case() -> Clocked:
        docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
        t0 = time.perf_counter()
        if prepare is not None:
            for d in docs:
                d.text = prepare(d.text)
        kept = {d.id for d in flt.run(iter(docs))}
        seconds = time.perf_counter() - t0
        scores = np.array([d.metadata.get(GOOD, 0.0) for d in docs], dtype=np.float64)
        return Clocked(seconds, Decided(scores, np.array([d.id in kept for d in docs])))

    return case


def compare(name: str, texts: Sequence[str], ours: Decided, theirs: Decided) -> tuple[int, str]:
    """(documents whose decision differs, a line saying how and how far the scores are)."""
    where = np.flatnonzero(ours.keep != theirs.keep)
    differ = int(where.size)
    pages = len({texts[i] for i in where})  # the documents cycle the pages: one page, many documents
    only_ours = int(np.sum(ours.keep & ~theirs.keep))
    # as QualityModel.score returns them: fastText's P can exceed 1 by 1e-5, ours clips it
    gap = np.abs(np.clip(theirs.scores, 0.0, 1.0).astype(np.float32) - ours.scores)
    return differ, (
        f"  {name:<14} keeps {int(theirs.keep.sum()):>6}; decisions differ on {differ} of {len(ours.keep)} "
        f"({pages} distinct page{'' if pages == 1 else 's'}; ours keeps {only_ours} it drops, it keeps "
        f"{differ - only_ours} ours drops); scores clipped as ours: {int(np.sum(gap == 0))} identical, |difference| median {float(np.median(gap)):.2g}, "
        f"max {float(gap.max()):.2g}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--language", default="es", help="the pages the model is trained on: es or fr")
    ap.add_argument("--docs", type=int, default=2000, help="documents scored per call (es and fr pages, cycled)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--check-offline", action="store_true",
                    help="fail if anything tries to reach the network (an audit hook on sockets)")
    args = ap.parse_args(argv)
    if args.docs < 1:
        raise SystemExit("--docs must be at least 1")

    attempts: list[dict] = []
    if args.check_offline:
        guard_sockets(attempts.append)

    import fasttext_pybind

    from pipelines.data.quality import normalise
    from pipelines.data.quality.classifier import MODEL_MEMBER, fasttext_bytes

    model, trained = trained_model(args.language)
    texts = documents(args.docs)
    n = len(texts)
    print(f"== model: {trained}")
    with tempfile.TemporaryDirectory(prefix="yunque-bench-quality-") as tmp:
        # The fastText file as quality_model stores it (the member of the model's zip) ...
        with zipfile.ZipFile(io.BytesIO(model.to_bytes())) as z:
            blob = z.read(MODEL_MEMBER)
        path = Path(tmp) / MODEL_MEMBER
        path.write_bytes(blob)
        flt = datatrove_filter(path, model.threshold)
        # ... is the model ours scores with, byte for byte
        same = hashlib.sha256(fasttext_bytes(model._ft)).hexdigest() == hashlib.sha256(blob).hexdigest()
        print(f"   {MODEL_MEMBER} {len(blob) / 1e6:.2f} MB, sha256 {hashlib.sha256(blob).hexdigest()[:16]}: datatrove "
              f"reads the file the model's zip stores, {'the same bytes' if same else 'NOT THE SAME BYTES'} "
              f"as the model ours scores with; fastText for both: {Path(fasttext_pybind.__file__).name}")
        normalised = [normalise(t, model.max_tokens) for t in texts]
        raw = [t.strip().replace("\n", " ") for t in texts]
        print(f"== documents: {n} ({sum(map(len, texts)) / 1e6:.2f} M characters; es and fr pages in turn); "
              f"fastText reads {np.mean([len(t.split()) for t in normalised]):.0f} tokens a document after "
              f"our normalise, {np.mean([len(t.split()) for t in raw]):.0f} of the raw text")

        def ours() -> Decided:
            scores = model.score(texts)
            return Decided(scores, ~model.drops(scores))

        cases = {
            "ours": ours,
            "datatrove": datatrove_case(flt, texts, lambda t: normalise(t, model.max_tokens)),
            "datatrove-raw": datatrove_case(flt, texts, None),
            # not a side: our normalise alone, to say how much of ours it is in each round
            "normalise": lambda: [normalise(t, model.max_tokens) for t in texts],
        }
        rounds = interleaved(cases, args.rounds)

    mine: Decided = rounds.last["ours"]
    print(f"\ndecisions (kept: P(good) >= {model.threshold:.3f}): ours keeps {int(mine.keep.sum())} of {n}")
    differ = {}
    for peer in ("datatrove", "datatrove-raw"):
        differ[peer], line = compare(peer, texts, mine, rounds.last[peer])
        print(line)

    rounds.report("ours", "docs/s", work=n, compare=[],
                  title=f"\nseconds per round over {n} documents (in the order they ran):")
    share = Spread.of([t["normalise"] / t["ours"] for t in rounds.times])
    print(f"  our normalise alone, share of ours' seconds in the same round: {share.fmt('.0%', '')}")
    lost: list[str] = []
    for peer in ("datatrove", "datatrove-raw"):
        s = rounds.versus("ours", peer)
        if s.median < 1:
            lost.append(f"speed: ours slower than {peer} ({s.fmt()})")
    if differ["datatrove"]:
        lost.append(f"{differ['datatrove']} decisions differ from datatrove on the same normalised lines")
    print("\nwhere a peer beats ours:" if lost else "\nno measure where a peer beats ours")
    for line in lost:
        print(f"  {line}")
    if args.check_offline:
        say_offline(attempts)


if __name__ == "__main__":
    main()
