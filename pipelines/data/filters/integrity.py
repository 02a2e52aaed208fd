"""Three rules of ours, after every published one, for broken text that passes them all.

`stop_word_share` (too few stop words: syllable gibberish, which fastText calls Spanish),
`foreign_script_share` (letters of another script, or U+FFFD: a page decoded with the
wrong charset) and `determiner_order` (determiners followed by function words: word salad,
a page's own words shuffled). They run last, so a document the published rules drop keeps
their reason; off in the `web` profile. Thresholds, how words are counted and the
measurements behind them: docs/data.md#quality-filters ("Three rules of ours").
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from itertools import pairwise

from pipelines.config import IntegrityConfig
from pipelines.data.filters.rules import NAN, RuleSpec, fails, ratio
from pipelines.data.filters.text import TextView
from pipelines.languages import Language, elided

NAME = "integrity"
RULES = ("stop_word_share", "foreign_script_share", "determiner_order")
REASONS = tuple(f"{NAME}:{r}" for r in RULES)
_STRIP = "".join(chr(c) for c in range(0x80) if not chr(c).isalnum()) + "¡¿«»“”‘’…–—·•"


@lru_cache(maxsize=4096)
def _foreign_letter(ch: str) -> bool:
    """A letter that is not Latin, or the replacement character. The ordinal indicators and
    the micro sign are letters to Unicode but Latin text's own ("1.º", "36,8 ºC", "5 µg")."""
    if ch == "\ufffd":
        return True
    return ch.isalpha() and ch not in "ªºµ" and not unicodedata.name(ch, "").startswith("LATIN")


def _bare(word: str) -> str:
    """Lowercase, punctuation stripped, and an elided form as its function word ("l'image"
    -> "l", which is no determiner here: its noun is in the same word)."""
    low = word.strip(_STRIP).lower()
    for mark in "'’":
        if mark in low:
            return low.partition(mark)[0]
    return low


def _has_foreign(word: str) -> bool:
    return not word.isascii() and any(map(_foreign_letter, word))


def specs(cfg: IntegrityConfig, language: Language) -> list[RuleSpec]:
    on = cfg.enabled
    script_on = on and language.script == "Latin"  # the rule knows Latin letters only
    order_on = on and bool(language.determiners)
    return [
        RuleSpec(f"{NAME}:stop_word_share", "share of words that are stop words", "below",
                 cfg.min_stop_word_share if on else None),
        RuleSpec(f"{NAME}:foreign_script_share", "share of words with a letter of another script or U+FFFD",
                 "above", cfg.max_foreign_word_share if script_on else None),
        RuleSpec(f"{NAME}:determiner_order", "share of determiners followed by a function word", "above",
                 cfg.max_determiner_function_share if order_on else None),
    ]  # fmt: skip


class Integrity:
    def __init__(self, cfg: IntegrityConfig, language: Language) -> None:
        self.stop_words = language.stop_words
        self.elisions = language.elisions
        self.determiners = language.determiners
        self.function_words = language.determiners | language.function_words
        self.min_determiners = cfg.min_determiners
        self.specs = specs(cfg, language)

    def measure(self, view: TextView) -> dict[str, float]:
        words = view.ws_words
        n = len(words)
        if not n:
            return {s.reason: NAN for s in self.specs}
        stop, elisions = self.stop_words, self.elisions
        n_stop = 0
        for w in words:
            low = w.strip(_STRIP).lower()
            if low in stop or (elisions and elided(low, elisions)):
                n_stop += 1
        n_foreign = sum(1 for w in words if _has_foreign(w))
        return {f"{NAME}:stop_word_share": ratio(n_stop, n), f"{NAME}:foreign_script_share": ratio(n_foreign, n),
                f"{NAME}:determiner_order": self._determiner_order(view)}

    def _determiner_order(self, view: TextView) -> float:
        """The share of determiners whose next word on the line is a function word (NaN
        below `min_determiners`: too few to judge)."""
        dets, function = self.determiners, self.function_words
        if not dets:
            return NAN
        seen = followed = 0
        for line in view.lines:
            words = [_bare(w) for w in line.split()]
            for word, nxt in pairwise(words):
                if word in dets:
                    seen += 1
                    followed += nxt in function
        return followed / seen if seen >= self.min_determiners else NAN

    def evaluate(self, view: TextView) -> tuple[bool, str | None, dict[str, float]]:
        values = self.measure(view)
        reason = next((s.reason for s in self.specs if fails(s.drop_if, s.threshold, values[s.reason])), None)
        return reason is None, reason, values

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        keep, reason, _ = self.evaluate(view)
        return keep, reason
