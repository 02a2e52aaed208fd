"""The learned quality signal: a fastText classifier trained on the user's own corpus,
nothing downloaded, that catches text no heuristic rule describes (word salad, spun spam,
pages spliced from pieces).

    ts = training_set(passed, rejected, cfg, good_examples, foreign)
    model = train(ts, cfg)              # model.threshold, model.report
    scores = model.score(texts)         # P(good), float32; dropped when < model.threshold
    model.save(path); QualityModel.load(path)

What it learns. Good: the pages every rule keeps, and the user's good examples. Bad:
corruptions of those very pages (shuffled words, cut-up lines, sentences interleaved with
another language's; see corruptions.py and training.py), weighing as much as the good. A
corruption keeps its page's words, so the classifier cannot tell them apart by
vocabulary: it must learn what normal word order in this corpus looks like. The rules'
rejections and sentence-shuffled copies are held out and scored but not trained on
(measured: both cost good pages and recall; training.py says by how much).

Why word n-grams. fastText averages the vectors of a document's tokens; with single words
(`word_ngrams=1`) a page and its shuffled words are the same bag and score the same. With
word pairs (`word_ngrams=2`, hashed into BUCKET rows) a shuffled page is mostly pairs no
real page has. Text is read as `normalise` says (lowercase, punctuation split off, digits
folded, the first MAX_TOKENS tokens).

The threshold. Unless `cfg.threshold` fixes it, `train` calibrates it on held-out
rule-passing pages (HELDOUT of them, never trained on, nor their corruptions): the
highest score below which at most `cfg.max_good_loss` of them fall, capped at 0.5 so that
a document the classifier thinks more likely good than bad is never dropped
(`calibrate_threshold`). The report gives the held-out good loss at that threshold and
the recall per kind of bad document: what it catches, and what it costs.

Limits. It knows only the junk it was shown and the word order of the pages it was
trained on: a page whose word pairs are mostly new to it (a short quotation, a genre or
register the sample barely holds) scores like a shuffled one, so the held-out good scores
have a long low tail and the calibrated threshold sits far below 0.5 on a varied corpus.
A sentence-shuffled page differs from its page only at the sentence joins, which word
pairs barely see: that kind is not caught. Cut-up lines (runs of 2-6 words kept) are
caught only in part. With foreign texts, a page with untranslated passages looks like a
mixed-language copy and scores low (it is not lost unless it falls under the threshold).
The first MAX_TOKENS tokens judge the whole document. Scores from models trained on
different samples are not comparable. Training is reproducible on glibc (see
classifier._zeroed_allocations); elsewhere fastText may start from leftover memory.
"""

from __future__ import annotations

from pipelines.data.quality.classifier import (
    BUCKET,
    MAX_THRESHOLD,
    RULE,
    QualityModel,
    calibrate_threshold,
    train,
)
from pipelines.data.quality.corruptions import CORRUPTIONS, corrupt
from pipelines.data.quality.normalise import MAX_TOKENS, normalise
from pipelines.data.quality.training import HELDOUT, TrainingSet, training_set

__all__ = [
    "BUCKET",
    "CORRUPTIONS",
    "HELDOUT",
    "MAX_THRESHOLD",
    "MAX_TOKENS",
    "RULE",
    "QualityModel",
    "TrainingSet",
    "calibrate_threshold",
    "corrupt",
    "normalise",
    "train",
    "training_set",
]
