"""What the learned quality classifier reads of a document, the same in training and scoring.

Lowercase; every run of letters and digits one token, digits folded to 0 (a page of prices
or dates is not a new vocabulary per number); every other visible character a token of its
own (punctuation says where sentences end, which word order around it is normal); lines
joined with spaces into the one line fastText reads per example. The underscore is
punctuation here: a "__label__x" in a document must not become a fastText label. Only the
first MAX_TOKENS tokens are read: the cost of scoring is bounded per document, and a page
is judged by its opening, as a reader would.
"""

from __future__ import annotations

import re

MAX_TOKENS = 1000
_TOKEN = re.compile(r"[^\W_]+|[^\w\s]|_")
_DIGIT = re.compile(r"[0-9]")
_CHARS_PER_TOKEN = 16  # a prefix this many times max_tokens long nearly always holds them all


def normalise(text: str, max_tokens: int = MAX_TOKENS) -> str:
    """`text` as the classifier reads it: one line of at most `max_tokens` tokens."""
    head = text[:max_tokens * _CHARS_PER_TOKEN]
    tokens = _TOKEN.findall(head.lower())
    if len(tokens) < max_tokens and len(head) < len(text):  # long tokens: read it all
        tokens = _TOKEN.findall(text.lower())
    return _DIGIT.sub("0", " ".join(tokens[:max_tokens]))
