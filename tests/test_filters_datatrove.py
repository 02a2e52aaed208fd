"""Parity with datatrove's filters: same tokenizer and thresholds, same decisions and
texts (skipped where datatrove, the `bench` extra, is not installed)."""

from __future__ import annotations

import random

import pytest

from pipelines.config import FilterConfig
from pipelines.data.filters import QualityFilters
from tests.test_filters import _CASES, SHORT_LINES, SPANISH, make_cfg


def test_decisions_match_datatrove() -> None:
    """Same tokenizer, same thresholds: datatrove's filters decide every case the same."""
    pytest.importorskip("datatrove")
    from bench.bench_filters import build_datatrove, run_datatrove_chain

    texts = [SPANISH] + [text for _, text, overrides in _CASES if not overrides and text]
    ours = QualityFilters(FilterConfig()).apply_many(texts)
    theirs, _ = run_datatrove_chain(build_datatrove(FilterConfig()), texts)
    assert [(o.keep, o.reason, o.text if o.keep else None) for o in ours] == [
        (k, r, t if k else None) for k, r, t in theirs
    ]


def _mixed_documents(seed: int, count: int) -> list[str]:
    """Documents stitched from the lines above, with the characters the rules look for
    ("[1]", "{", "…", "#", "•" ...) and every kind of line break sprinkled in."""
    rng = random.Random(seed)
    lines = [ln for text in [SPANISH, *SHORT_LINES, *(c[1] for c in _CASES[:25])]
             for ln in text.split("\n") if ln.strip() and len(ln) < 2000]  # fmt: skip
    pieces = ["[1]", "[edit]", "{", "javascript", "lorem ipsum", "…", "...", "#", "•", "- ",
              "uses cookies", "x" * 1001, "_", "\u00a0", "。"]  # fmt: skip
    breaks = ["\n", "\n\n", "\r\n", "\n\n\n", "\x0c", "\u2028", " \n ", "\n  \n", "\r"]
    docs = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 30)):
            words = rng.choice(lines).split(" ")
            if rng.random() < 0.3:
                words.insert(rng.randint(0, len(words)), rng.choice(pieces))
            parts.append(parts[-1] if parts and rng.random() < 0.1 else " ".join(words))
        docs.append("".join(p + rng.choice(breaks) for p in parts))
    return docs


@pytest.mark.parametrize(
    "only",
    [None, ("gopher_repetition",), ("gopher_quality",), ("c4", "fineweb")],
    ids=["all", "gopher_repetition", "gopher_quality", "c4+fineweb"],
)
def test_mixed_documents_match_datatrove(only: tuple[str, ...] | None) -> None:
    pytest.importorskip("datatrove")
    import bench.bench_filters as bench

    names = only or bench.FILTERS
    cfg = make_cfg({f"{n}.enabled": n in names for n in bench.FILTERS})
    docs = _mixed_documents(seed=len(names), count=300)
    ours = QualityFilters(cfg).apply_many(docs)
    dt = bench.build_datatrove(cfg)
    theirs, _ = bench.run_datatrove_chain({n: dt[n] for n in names}, docs, names)
    assert [o.keep for o in ours] == [t[0] for t in theirs]
    assert [o.text for o in ours if o.keep] == [t[2] for t in theirs if t[0]]
