"""The learned quality signal's examples: good pages, bad pages and a held-out part of both.

Good: the user's good examples and the rule-passing pages; bad: corruptions of those very
pages (TRAINED_CORRUPTIONS in turn, several per page below MIN_TRAIN_PAGES), weighted so
that both sides weigh the same. The held-out part (HELDOUT) is split off by document before
anything is corrupted, so the classifier never sees a held-out page in any form; there
every kind corrupts every page, to measure each kind's recall. Deterministic in `cfg.seed`
and the order of the inputs; docs/learned-quality.md#how-it-learns.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipelines.config import LearnedQualityConfig
from pipelines.data.quality.corruptions import (
    CORRUPTIONS,
    CUT_LINES,
    MIXED_LANGUAGES,
    SHUFFLED_WORDS,
    corrupt,
)
from pipelines.data.quality.normalise import normalise

HELDOUT = 0.2  # of the rule-passing pages (and of the rejections), for calibration
# The rules' rejections trained on, as a share of the bad side (corruptions fill the rest).
# None: measured on the Spanish sample (2,853 rule-passing pages, 9,885 rejections), a
# share of 0.1 / 0.25 / 0.5 lowered the held-out good pages' 1st percentile from 0.003 to
# 0.001 / 0.000 / 0.000 and cut_lines recall from 35% to 18% / 10% / 6%: the rejections
# are mostly one genre (short fortunes) and the classifier learnt the genre, not the
# damage. The rules drop those pages anyway. They are still held out and scored, so the
# report says how much of the rules' work the signal repeats.
MAX_REJECTED_SHARE = 0.0
# The kinds trained on. shuffled_sentences is left out: a sentence-shuffled page keeps every
# word pair but the few at its sentence joins, so its copies teach that good word pairs are
# bad. Measured on the Spanish GIMP pages (98 trained on, 40 unseen): with it in the mix the
# unseen pages' 5th percentile fell from 0.94 to 0.84 and the highest word-salad score rose
# from 0.35 to 0.57, while its own copies still scored like their pages (median 0.86). It
# is still measured on the held-out pages (MEASURED_CORRUPTIONS).
TRAINED_CORRUPTIONS = (SHUFFLED_WORDS, CUT_LINES, MIXED_LANGUAGES)
MEASURED_CORRUPTIONS = CORRUPTIONS
# Below this many good pages each page is corrupted more than once (in another kind each
# time, up to one copy per kind) and the good pages are weighted to match: a small corpus
# then still gives enough contrasting pairs (measured: 60-100 pages, three copies: every
# word-salad page dropped instead of all but one or two).
MIN_TRAIN_PAGES = 3000
PASSED, GOOD_EXAMPLE, REJECTED = "passed", "good_example", "rejected"


@dataclass
class TrainingSet:
    """Texts per side and part. `good_weight`: how many times each good text is trained
    on, to balance the bad side. `*_sources` say where each text came from, in order
    (PASSED / GOOD_EXAMPLE for good, REJECTED or a corruption kind for bad); a set built
    by hand without them counts its texts as "unknown" in the report."""

    train_good: list[str]
    train_bad: list[str]
    heldout_good: list[str]
    heldout_bad: list[str]
    good_weight: int = 1
    train_good_sources: list[str] = field(default_factory=list)
    train_bad_sources: list[str] = field(default_factory=list)
    heldout_bad_sources: list[str] = field(default_factory=list)


def _split(items: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """(train, held out): HELDOUT of `items`, at least one of each when there are two."""
    items = list(items)
    rng.shuffle(items)
    n_held = min(max(round(HELDOUT * len(items)), 1 if len(items) >= 2 else 0), len(items))
    return items[n_held:], items[:n_held]


def _corruptions(pages: list[str], n: int, kinds: tuple[str, ...], rng: random.Random,
                 foreign: Sequence[str]) -> tuple[list[str], list[str]]:
    """n corruptions of `pages`: the pages in turn, page p of round r corrupted by kind
    (p + r) mod len(kinds), so the kinds are even and a page met again gets another kind;
    a copy that normalises to its page is skipped."""
    texts: list[str] = []
    sources: list[str] = []
    if not pages or not kinds:
        return texts, sources
    for i in range(max(n, 0) * 2):  # skipped copies are rare; bound the loop all the same
        if len(texts) >= n:
            break
        p, r = i % len(pages), i // len(pages)
        page, kind = pages[p], kinds[(p + r) % len(kinds)]
        copy = corrupt(page, kind, rng, foreign)
        if normalise(copy) != normalise(page):
            texts.append(copy)
            sources.append(kind)
    return texts, sources


def training_set(passed: Sequence[str], rejected: Sequence[str], cfg: LearnedQualityConfig,
                 good_examples: Sequence[str] = (), foreign: Sequence[str] = ()) -> TrainingSet:
    """The examples for `train` (see the module docstring): up to cfg.sample_docs
    rule-passing pages, HELDOUT of them held out. `rejected` should be what the quality
    rules dropped, not dedup's duplicates (copies of kept pages); one that normalises to a
    rule-passing page is left out. They are held out (and trained on as far as
    MAX_REJECTED_SHARE says). `foreign`: other-language documents for
    mixed_languages; with none that kind is left out rather than replaced, so that the
    counts say what was trained on."""
    passed = [t for t in passed if t.strip()]
    if len(passed) < 2:
        raise ValueError(f"learned quality: {len(passed)} rule-passing documents; at least 2 "
                         "are needed (one to train on, one to calibrate the threshold)")
    # One stream per purpose: how many rejections or foreign texts there are does not change
    # which pages are held out, nor how they are corrupted.
    rng = random.Random(f"{cfg.seed}:pages")
    if len(passed) > cfg.sample_docs:
        passed = rng.sample(passed, cfg.sample_docs)
    good = [t for t in good_examples if t.strip()]
    foreign = [t for t in foreign if t.strip()]
    has_foreign = bool(foreign)
    trained = tuple(k for k in TRAINED_CORRUPTIONS if k != MIXED_LANGUAGES or has_foreign)
    measured = tuple(k for k in MEASURED_CORRUPTIONS if k != MIXED_LANGUAGES or has_foreign)

    train_passed, held_passed = _split(passed, rng)
    rejected = [t for t in rejected if t.strip()]
    rejected = random.Random(f"{cfg.seed}:rejected").sample(rejected, min(len(rejected), cfg.sample_docs))
    seen = {normalise(t) for t in passed}
    rejected = [t for t in rejected if normalise(t) not in seen]
    train_good = good + train_passed
    copies = min(len(trained), max(1, -(-MIN_TRAIN_PAGES // len(train_good))))
    n_bad = copies * len(train_good)
    held_rej = rejected[:len(held_passed)]  # as many as the held-out good pages
    train_rej = rejected[len(held_rej):][:int(MAX_REJECTED_SHARE * n_bad)]

    pages = list(train_good)
    rng = random.Random(f"{cfg.seed}:corruptions")
    rng.shuffle(pages)
    train_cor, train_cor_src = _corruptions(pages, n_bad - len(train_rej), trained, rng, foreign)
    held_cor, held_cor_src = _corruptions(held_passed, len(held_passed) * len(measured), measured,
                                          rng, foreign)
    return TrainingSet(
        train_good=train_good, train_bad=train_rej + train_cor,
        heldout_good=held_passed, heldout_bad=held_rej + held_cor, good_weight=copies,
        train_good_sources=[GOOD_EXAMPLE] * len(good) + [PASSED] * len(train_passed),
        train_bad_sources=[REJECTED] * len(train_rej) + train_cor_src,
        heldout_bad_sources=[REJECTED] * len(held_rej) + held_cor_src,
    )
