"""Repetition measures of generated text, on token ids (what the model emitted, free of
any word-splitting choice). A model stuck in a loop has low distinct-n and a high
repeated n-gram rate; fluent text of 64 tokens has almost no repeated 4-grams."""

from __future__ import annotations

from collections.abc import Sequence


def ngrams(tokens: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(tokens: Sequence[int], n: int) -> float:
    """Distinct n-grams over all n-grams (1.0: nothing repeats). 1.0 for text shorter than n."""
    grams = ngrams(tokens, n)
    return len(set(grams)) / len(grams) if grams else 1.0


def repeated_ngram_rate(tokens: Sequence[int], n: int = 4) -> float:
    """Fraction of n-grams that already occurred earlier in the same text."""
    grams = ngrams(tokens, n)
    if not grams:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)


def repetition(tokens: Sequence[int]) -> dict[str, float]:
    return {"distinct_1": round(distinct_n(tokens, 1), 4), "distinct_2": round(distinct_n(tokens, 2), 4),
            "repeat_4": round(repeated_ngram_rate(tokens, 4), 4)}
