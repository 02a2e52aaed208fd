"""C4's line and document rules (Raffel et al. 2020), as datatrove's C4QualityFilter applies them.

A line is dropped for a too-long word, too few words, "javascript" or a cookie /
terms-of-use phrase (C4's and the language pack's); "lorem ipsum" and "{" drop the whole
document, and so do too few sentences in the kept lines. A kept document's text is its
kept lines joined by "\\n". The `docs` profile drops only a "{" line
(`curly_bracket_scope="line"`): in documentation a brace is content, not leaked code. The
order and the measurements: docs/data.md#the-rules-one-by-one.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pipelines.config import C4Config
from pipelines.data.filters.rules import RuleSpec
from pipelines.data.filters.text import WORD_RE, TextView, count_sentences, sentence_spans

NAME = "c4"
RULES = ("lorem_ipsum", "curly_bracket", "too_few_sentences")
REASONS = tuple(f"{NAME}:{r}" for r in RULES)

_CITATION_RE = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_END_PUNCTUATION = (".", "?", "!", '"', "'")
POLICY_PHRASES = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)


def specs(cfg: C4Config) -> list[RuleSpec]:
    on = cfg.enabled
    return [
        RuleSpec(f"{NAME}:lorem_ipsum", "a kept line contains 'lorem ipsum'", "flag",
                 1.0 if on and cfg.filter_lorem_ipsum else None),
        RuleSpec(f"{NAME}:curly_bracket", "a kept line contains '{'", "flag",
                 1.0 if on and cfg.filter_curly_bracket and cfg.curly_bracket_scope == "document" else None),
        RuleSpec(f"{NAME}:too_few_sentences", "sentences in the kept lines", "below",
                 float(cfg.min_num_sentences) if on else None),
    ]  # fmt: skip


class C4Result(NamedTuple):
    keep: bool
    reason: str | None
    # The kept text (lines removed), or the input text unchanged when the document is dropped.
    text: str
    # A view of `text` for the filters that run next (the input view when nothing changed).
    view: TextView


class C4:
    def __init__(self, cfg: C4Config, policy_phrases: tuple[str, ...] = ()) -> None:
        """`policy_phrases`: the corpus language's own, lowercase, besides C4's English ones."""
        self.cfg = cfg
        self.policy_phrases = tuple(dict.fromkeys((*POLICY_PHRASES, *policy_phrases)))
        self.curly_drops_document = cfg.curly_bracket_scope == "document"

    def filter(self, view: TextView) -> C4Result:
        return self._scan(view, None)

    def evaluate(self, view: TextView) -> tuple[C4Result, dict[str, float]]:
        """The result of `filter` and the rules' metrics: the whole text is scanned (a
        document-level phrase does not stop it) and every sentence of the kept lines is
        counted. Phrase flags are measured even where their rule is off."""
        metrics: dict[str, float] = {}
        return self._scan(view, metrics), metrics

    def _scan(self, view: TextView, metrics: dict[str, float] | None) -> C4Result:
        """`metrics` None: the fast path, which stops at the first document-level failure."""
        cfg = self.cfg
        full = metrics is not None
        failed: str | None = None  # the first document-level failure, in line order (full scan)
        text = view.text
        if cfg.split_paragraph:
            units = view.lines
        else:
            units = [text[a:b] for a, b in sentence_spans(text)]

        # A phrase absent from the whole (lowercased) text is absent from every line, so the
        # per-line substring tests run only for the phrases that occur somewhere at all.
        # ’ as ' so that a phrase written with either apostrophe matches ("conditions d’utilisation")
        lowered = text.lower().replace("’", "'")
        check_lorem = (full or cfg.filter_lorem_ipsum) and "lorem ipsum" in lowered
        check_js = cfg.filter_javascript and "javascript" in lowered
        check_curly = (full or cfg.filter_curly_bracket) and "{" in text
        lorem = curly = False
        policy = tuple(p for p in self.policy_phrases if p in lowered) if cfg.filter_policy else ()
        needs_lower = check_lorem or check_js or bool(policy)
        check_citations = cfg.remove_citations and "[" in text
        max_word = cfg.max_word_length
        min_words = cfg.min_words_per_line
        min_sentences = cfg.min_num_sentences

        kept: list[str] = []
        # When the input's word count is known (the Gopher filters ran), keep the count of
        # the kept text up to date instead of tokenizing it again later: tokens never cross
        # a line break, so dropping a line drops exactly that line's tokens.
        n_words = view.known_n_words()
        track = n_words is not None
        removed: list[str] = []  # lines dropped (stripped), for the word count
        edited: list[tuple[str, str]] = []  # (before, after) citation removal, kept lines
        n_sentences = 0
        for raw in units:
            line = raw.strip()
            if not line:
                continue  # no words: the min-words rule would drop it (for any min >= 1)
            # A word longer than max_word needs a line longer than max_word.
            if (
                max_word != -1
                and len(line) > max_word
                and any(len(w) > max_word for w in line.split())
            ):
                removed.append(line)
                continue
            original = line
            if check_citations and "[" in line:
                line = _CITATION_RE.sub("", line)
            if cfg.filter_no_terminal_punct and (
                not line.endswith(_END_PUNCTUATION) or line.endswith("...")
            ):
                removed.append(original)
                continue
            if min_words > 0 and len(original.split(None, min_words - 1)) < min_words:
                removed.append(original)
                continue
            low = line.lower().replace("’", "'") if needs_lower else ""
            if check_lorem and "lorem ipsum" in low:
                if not full:
                    return C4Result(False, f"{NAME}:lorem_ipsum", text, view)
                lorem = True
                if cfg.filter_lorem_ipsum:
                    failed = failed or f"{NAME}:lorem_ipsum"
                    continue
            if check_js and "javascript" in low:
                removed.append(original)
                continue
            if check_curly and "{" in line:
                if cfg.filter_curly_bracket and not self.curly_drops_document:
                    curly = True
                    removed.append(original)
                    continue
                if not full:
                    return C4Result(False, f"{NAME}:curly_bracket", text, view)
                curly = True
                if cfg.filter_curly_bracket:
                    failed = failed or f"{NAME}:curly_bracket"
                    continue
            if policy and any(p in low for p in policy):
                removed.append(original)
                continue
            if line is not original:  # re.sub returns its input when nothing matched
                edited.append((original, line))
            # Only "at least min_sentences" matters, so stop counting once it is reached.
            if full or n_sentences < min_sentences:
                n_sentences += count_sentences(line) if cfg.split_paragraph else 1
            kept.append(line)

        if full:
            metrics[f"{NAME}:lorem_ipsum"] = float(lorem)
            metrics[f"{NAME}:curly_bracket"] = float(curly)
            metrics[f"{NAME}:too_few_sentences"] = float(n_sentences)
            if failed:
                return C4Result(False, failed, text, view)
        if n_sentences < min_sentences:
            return C4Result(False, f"{NAME}:too_few_sentences", text, view)
        # Stripped again: citation removal can leave a space at the end of the last line.
        out = ("\n" if cfg.split_paragraph else " ").join(kept).strip()
        if out == text:
            return C4Result(True, None, text, view)
        if track:
            assert n_words is not None
            count = WORD_RE.findall
            n_words -= sum(len(count(ln)) for ln in removed)
            n_words += sum(len(count(after)) - len(count(before)) for before, after in edited)
            return C4Result(True, None, out, TextView.derived(out, n_words))
        return C4Result(True, None, out, TextView(out))
