"""The dedup tests' corpus: 200 unrelated random documents, three of which are one text
with none, one or two words changed, and the default dedup configuration."""

from __future__ import annotations

import numpy as np

from pipelines.config import DedupConfig

CFG = DedupConfig()
N_RANDOM = 200
PLANTED = (150, 42, 199)  # rows of the near-duplicate copies


def vocab(rng: np.random.Generator, size: int = 5000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(3, 10)))) for _ in range(size)]


def corpus() -> tuple[list[str], list[str]]:
    """200 unrelated random documents; three of them are one text with one or two words
    changed (true Jaccard of 5-gram sets about 0.9, so LSH 14x8 finds them with
    probability > 0.99; the seed is fixed, so the test is deterministic)."""
    rng = np.random.default_rng(7)
    words = vocab(rng)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(80, 200)))) for _ in range(N_RANDOM)]
    base = rng.choice(words, size=150).tolist()
    for k, pos in enumerate(PLANTED):
        copy = list(base)
        for j in range(k):  # copy 0 exact, copy 1 one edit, copy 2 two edits
            copy[30 + 50 * j] = "cambiado"
        texts[pos] = " ".join(copy)
    # ids not in row order: the copies are doc-0150 (row 150), doc-0154 (row 42) and
    # doc-0163 (row 199), so "keeper = min doc_id" (row 150) is not "keeper = first row"
    ids = [f"doc-{(i * 37) % N_RANDOM:04d}" for i in range(N_RANDOM)]
    return ids, texts
