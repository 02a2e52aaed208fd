"""Two rules of ours, after every published one, for broken text that passes them all.

  stop_word_share       fewer than 15 % of the whitespace-separated words are stop words of
                        the language (punctuation around a word stripped, lowercased)
  foreign_script_share  more than 2 % of the words hold a letter of another script than the
                        language's, or U+FFFD (a replacement character)

Why: fastText calls pseudo-words built from Spanish syllables Spanish, and such text still
carries two stop words, Gopher's only vocabulary rule; real prose is 25-50 % stop words
(RedPajama-V2 keeps the same signal as `rps_doc_stop_word_fraction`). A page decoded with
the wrong charset (GBK, Shift-JIS, KOI8-R, cp1251) changes only its accented letters into
another script, which fastText and the symbol rules do not notice.

Measured on the held-out set (tests/test_docs_eval.py): good manual pages have a stop-word
share of at least 0.244 and a foreign-script share of at most 0.0012; syllable gibberish at
most 0.107; every mis-decoded page at least 0.085. The filter runs last, so a document the
published rules drop keeps their reason. Off in the `web` profile (FineWeb as published).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from pipelines.config import IntegrityConfig
from pipelines.data.filters.rules import NAN, RuleSpec, fails, ratio
from pipelines.data.filters.text import TextView

NAME = "integrity"
RULES = ("stop_word_share", "foreign_script_share")
REASONS = tuple(f"{NAME}:{r}" for r in RULES)
_STRIP = "".join(chr(c) for c in range(0x80) if not chr(c).isalnum()) + "¡¿«»“”‘’…–—·•"
# Languages written in another script than Latin: the foreign-script rule is off for them.
_LATIN_LANGUAGES_EXCLUDED = frozenset({"ru", "uk", "bg", "el", "zh", "ja", "ko", "ar", "he", "hi", "th"})


@lru_cache(maxsize=4096)
def _foreign_letter(ch: str) -> bool:
    """A letter that is not Latin, or the replacement character."""
    if ch == "\ufffd":
        return True
    return ch.isalpha() and not unicodedata.name(ch, "").startswith("LATIN")


def _has_foreign(word: str) -> bool:
    return not word.isascii() and any(map(_foreign_letter, word))


def specs(cfg: IntegrityConfig, language: str) -> list[RuleSpec]:
    on = cfg.enabled
    script_on = on and language not in _LATIN_LANGUAGES_EXCLUDED
    return [
        RuleSpec(f"{NAME}:stop_word_share", "share of words that are stop words", "below",
                 cfg.min_stop_word_share if on else None),
        RuleSpec(f"{NAME}:foreign_script_share", "share of words with a letter of another script or U+FFFD",
                 "above", cfg.max_foreign_word_share if script_on else None),
    ]  # fmt: skip


class Integrity:
    def __init__(self, cfg: IntegrityConfig, stop_words: frozenset[str], language: str) -> None:
        self.stop_words = stop_words
        self.specs = specs(cfg, language)

    def measure(self, view: TextView) -> dict[str, float]:
        words = view.ws_words
        n = len(words)
        if not n:
            return {s.reason: NAN for s in self.specs}
        stop = self.stop_words
        n_stop = sum(1 for w in words if w.strip(_STRIP).lower() in stop)
        n_foreign = sum(1 for w in words if _has_foreign(w))
        return {f"{NAME}:stop_word_share": ratio(n_stop, n), f"{NAME}:foreign_script_share": ratio(n_foreign, n)}

    def evaluate(self, view: TextView) -> tuple[bool, str | None, dict[str, float]]:
        values = self.measure(view)
        reason = next((s.reason for s in self.specs if fails(s.drop_if, s.threshold, values[s.reason])), None)
        return reason is None, reason, values

    def filter(self, view: TextView) -> tuple[bool, str | None]:
        keep, reason, _ = self.evaluate(view)
        return keep, reason
