"""The learned quality classifier: fastText trained on a TrainingSet, its calibrated
threshold, its report, and the one file it is kept in.

A document is dropped when its score, P(good), is below `QualityModel.threshold`.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import random
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import LearnedQualityConfig
from pipelines.data.quality.normalise import MAX_TOKENS, normalise
from pipelines.data.quality.training import TrainingSet

RULE = "learned_quality:score"  # the reason a document it drops carries
GOOD, BAD = "__label__good", "__label__bad"
# hashed word-pair rows: 2**16 measured no worse than 2**18 on the GIMP pages and the Spanish
# sample, at a quarter of the model's size (it is stored in the home at every training)
BUCKET = 2**16
# Training lines are windows of WINDOW tokens, not whole pages: fastText makes one update
# per line, spread over the line's tokens, so a 500-word page learns little per update
# (measured: whole pages at fastText's rates stayed at 0.5 on everything). Scoring reads
# the whole page at once; its logit is then the token-weighted mean of its windows'.
WINDOW = 25
LR = 1.0  # fastText's 0.1 is for millions of lines; a few thousand pages need bigger steps
MAX_THRESHOLD = 0.5  # see calibrate_threshold
FORMAT = 1  # of the saved file: bump when its members or their meaning change
MODEL_MEMBER, _META = "model.bin", "meta.json"
_BATCH = 4096  # documents per fastText predict call


def calibrate_threshold(heldout_good_scores: Sequence[float] | np.ndarray, max_good_loss: float) -> float:
    """The highest threshold below which at most `max_good_loss` of the held-out good
    scores fall (a document is dropped when its score is below the threshold; a score
    equal to it is kept), and never above MAX_THRESHOLD = 0.5.

    The cap: a document the classifier judges more likely good than bad is never dropped.
    Below 0.5 the held-out quantile decides alone; above it, the quantile would drop pages
    the classifier calls good on the strength of the held-out sample's tail, which says
    little about pages unlike the sample (a shard it missed, a genre it barely holds).
    The cap can only lower the good pages lost; it costs recall only on copies the
    classifier was unsure of.
    """
    scores = np.sort(np.asarray(heldout_good_scores, dtype=np.float64))
    if scores.size == 0:
        raise ValueError("calibrate_threshold: no held-out good scores to calibrate on")
    if not 0 <= max_good_loss <= 1:
        raise ValueError(f"calibrate_threshold: max_good_loss {max_good_loss} is not in [0, 1]")
    k = int(np.floor(max_good_loss * scores.size + 1e-9))  # pages allowed below the threshold
    quantile = float(scores[k]) if k < scores.size else 1.0
    return min(quantile, MAX_THRESHOLD)


class QualityModel:
    """A trained classifier: `score(texts)` is P(good) per text; `threshold` the score
    below which a document is dropped; `report` what it was trained on and how it did on
    the held-out part (see `train`)."""

    def __init__(self, ft: Any, threshold: float, report: dict[str, Any],
                 max_tokens: int = MAX_TOKENS) -> None:
        self._ft = ft
        self.threshold = float(threshold)
        self.report = report
        self.max_tokens = max_tokens

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """P(good) of each text, float32 in [0, 1], in order."""
        out = np.empty(len(texts), dtype=np.float32)
        k = len(self._ft.get_labels())
        for start in range(0, len(texts), _BATCH):
            lines = [normalise(t, self.max_tokens) for t in texts[start:start + _BATCH]]
            labels, probs = self._ft.predict(lines, k=k)
            for i, (lab, p) in enumerate(zip(labels, probs)):
                out[start + i] = dict(zip(lab, p)).get(GOOD, 0.0)
        # fastText's softmax can round a hair above 1.
        return np.clip(out, 0.0, 1.0, out=out)

    def drops(self, scores: np.ndarray) -> np.ndarray:
        """Which of `scores` this model drops (score below the threshold)."""
        return np.asarray(scores) < self.threshold

    # --- the one file ------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """A zip of the fastText model (model.bin, deflated) and meta.json (format,
        threshold, report, max_tokens); the same for the same model, byte for byte."""
        meta = {"format": FORMAT, "threshold": self.threshold, "max_tokens": self.max_tokens,
                "report": self.report}
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            # Deflated, fast: the hashed rows no training example reached are still zero.
            z.writestr(_member(MODEL_MEMBER), fasttext_bytes(self._ft), compresslevel=1)
            z.writestr(_member(_META), json.dumps(meta, indent=1, sort_keys=True))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<bytes>") -> QualityModel:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                meta = json.loads(z.read(_META))
                model = z.read(MODEL_MEMBER)
        except (zipfile.BadZipFile, KeyError, ValueError) as e:
            raise ValueError(f"{name}: not a learned quality model ({e})") from e
        if meta.get("format") != FORMAT:
            raise ValueError(f"{name}: learned quality model format {meta.get('format')!r}, "
                             f"this code reads {FORMAT}; retrain it")
        return cls(_ft_from_bytes(model), meta["threshold"], meta["report"], meta["max_tokens"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model to `path` (written beside it, then renamed into place)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> QualityModel:
        return cls.from_bytes(Path(path).read_bytes(), str(path))


def _member(name: str) -> zipfile.ZipInfo:
    """A zip member with a fixed date: the same model is the same bytes (callers hash them)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def fasttext_bytes(ft: Any) -> bytes:
    with tempfile.TemporaryDirectory(prefix="yunque-quality-") as tmp:
        f = Path(tmp) / MODEL_MEMBER
        ft.save_model(str(f))
        return f.read_bytes()


def _ft_from_bytes(data: bytes) -> Any:
    import fasttext

    with tempfile.TemporaryDirectory(prefix="yunque-quality-") as tmp:
        f = Path(tmp) / MODEL_MEMBER
        f.write_bytes(data)
        return fasttext.load_model(str(f))


def _windows(text: str) -> list[str]:
    tokens = normalise(text).split(" ")
    return [" ".join(tokens[i:i + WINDOW]) for i in range(0, len(tokens), WINDOW)]


def _write_examples(path: Path, ts: TrainingSet, seed: int) -> int:
    """One "label window" line per window of each example (good ones ts.good_weight
    times), shuffled: fastText reads the file in order, and a file of all good then all
    bad would end training on one label. Returns the number of lines."""
    rows = [f"{GOOD} {w}\n" for t in ts.train_good for w in _windows(t)] * ts.good_weight
    rows += [f"{BAD} {w}\n" for t in ts.train_bad for w in _windows(t)]
    random.Random(seed).shuffle(rows)
    path.write_text("".join(rows), encoding="utf-8")
    return len(rows)


M_PERTURB = -6  # glibc's mallopt parameter


@contextmanager
def _zeroed_allocations() -> Iterator[bool]:
    """While inside, glibc fills every block malloc hands out with zeros; yields whether it
    could (False off glibc).

    Why: fastText's one-thread start (DenseMatrix::uniform with thread=1) initialises only
    the first tenth of the input matrix and leaves the rest of the block as malloc found
    it; a block glibc recycles from an earlier model in the same process then holds that
    model's numbers (measured: 40% non-zero rows instead of 10%) or garbage that ends
    training with "Encountered NaN". The same inputs would train different models. With
    M_PERTURB = 0xFF glibc clears each block it hands out (the complement of the byte), so
    the rows start at zero; blocks it maps fresh from the kernel are zero already.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        yield False
        return
    done = bool(mallopt(M_PERTURB, 0xFF))
    try:
        yield done
    finally:
        if done:
            mallopt(M_PERTURB, 0)


def _fit(path: Path, cfg: LearnedQualityConfig) -> tuple[Any, float, bool]:
    """fastText on `path`; (model, learning rate used, whether its matrices started from
    zeroed memory: see _zeroed_allocations). fastText stops with "Encountered
    NaN" when a step diverges: then the rate is halved and training starts over (the
    same inputs still give the same model)."""
    import fasttext

    lr = LR
    while True:
        try:
            with _zeroed_allocations() as zeroed:
                ft = fasttext.train_supervised(
                    input=str(path), lr=lr, dim=cfg.dim, epoch=cfg.epochs,
                    wordNgrams=cfg.word_ngrams, minCount=1, bucket=BUCKET, loss="softmax",
                    thread=1, seed=cfg.seed, verbose=0)
            return ft, lr, zeroed
        except RuntimeError as e:
            if "NaN" not in str(e) or lr < LR / 16:
                raise RuntimeError(f"learned quality: fastText training failed at lr {lr}: {e}") from e
            lr /= 2


def _recall(scores: np.ndarray, threshold: float) -> float:
    return float(np.mean(scores < threshold)) if scores.size else float("nan")


def train(ts: TrainingSet, cfg: LearnedQualityConfig) -> QualityModel:
    """fastText on ts.train_*, one thread and cfg.seed (the same inputs give the same
    scores); then the threshold: cfg.threshold if set, else calibrated on
    ts.heldout_good (`calibrate_threshold` at cfg.max_good_loss).

    `report`: counts per part and source, the calibrated and the used threshold, held-out
    good loss and bad recall (per source: rejected, each corruption kind) at that
    threshold, held-out score quantiles, model bytes; nothing that varies between runs (no
    timings), so that the same inputs give the same file."""
    if not ts.train_good or not ts.train_bad:
        raise ValueError(f"learned quality: cannot train on {len(ts.train_good)} good and "
                         f"{len(ts.train_bad)} bad documents; both sides need some")
    if not ts.heldout_good:
        raise ValueError("learned quality: no held-out good documents to calibrate on")
    with tempfile.TemporaryDirectory(prefix="yunque-quality-") as tmp:
        data = Path(tmp) / "train.txt"
        lines = _write_examples(data, ts, cfg.seed)
        ft, lr, zeroed = _fit(data, cfg)

    model = QualityModel(ft, 0.0, {})
    good = model.score(ts.heldout_good)
    bad = model.score(ts.heldout_bad)
    calibrated = calibrate_threshold(good, cfg.max_good_loss)
    threshold = calibrated if cfg.threshold is None else float(cfg.threshold)
    model.threshold = threshold
    bad_src = ts.heldout_bad_sources or ["unknown"] * len(ts.heldout_bad)
    by_src = {s: bad[[i for i, x in enumerate(bad_src) if x == s]] for s in sorted(set(bad_src))}
    model.report = {
        "counts": {
            "train_good": dict(Counter(ts.train_good_sources or ["unknown"] * len(ts.train_good))),
            "good_weight": ts.good_weight,
            "train_lines": lines,
            "train_bad": dict(Counter(ts.train_bad_sources or ["unknown"] * len(ts.train_bad))),
            "heldout_good": len(ts.heldout_good),
            "heldout_bad": {s: int(v.size) for s, v in by_src.items()},
        },
        "threshold": threshold,
        "calibrated_threshold": calibrated,
        "threshold_fixed": cfg.threshold is not None,
        "heldout_good_loss": _recall(good, threshold),
        "heldout_bad_recall": {s: _recall(v, threshold) for s, v in by_src.items()},
        "heldout_good_quantiles": {f"p{q:02d}": float(np.percentile(good, q)) for q in (1, 5, 50)},
        "heldout_bad_median": {s: float(np.median(v)) for s, v in by_src.items()},
        "model_bytes": len(fasttext_bytes(ft)),
        "zeroed_init": zeroed,
        "params": {"word_ngrams": cfg.word_ngrams, "dim": cfg.dim, "epochs": cfg.epochs,
                   "lr": lr, "window": WINDOW, "bucket": BUCKET, "seed": cfg.seed, "max_tokens": MAX_TOKENS},
    }
    return model
