"""The learned quality signal: a fastText classifier trained on the user's own corpus,
nothing downloaded, for text no rule describes (word salad, spun spam, spliced pages).

`train(training_set(...), cfg)` gives a model with its calibrated `threshold` and held-out
`report`; `model.score(texts)` is P(good) as float32, a document dropped below the
threshold; `save` and `QualityModel.load` keep it. The bad examples are corruptions of the
good pages themselves, so only word order (word pairs, `word_ngrams=2`) tells them apart.
How it learns, the threshold and its limits: docs/learned-quality.md.
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
