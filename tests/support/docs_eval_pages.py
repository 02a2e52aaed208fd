"""The good half of the held-out documentation set: GIMP manual pages in each language of
LANGUAGES, chosen by structure only, stored in `tests/data/docs_eval/gimp-help-<lang>.jsonl.gz`
beside the package's licence note `gimp-help-<lang>.COPYRIGHT` (both rebuilt by
`python -m bench.build_docs_eval --language <lang>`). A module of its own so that the junk
generators, which damage and shuffle these pages (mojibake, word salad), need not import
the evaluation.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

from tests.support import TEST_DATA

DATA = TEST_DATA / "docs_eval"
LANGUAGES = ("es", "fr")  # the languages the set has pages in (ISO 639-1)


def package(language: str) -> str:
    """The Debian package the language's pages come from."""
    return f"gimp-help-{language}"


def good_file(language: str) -> Path:
    return DATA / f"{package(language)}.jsonl.gz"


def copyright_file(language: str) -> Path:
    return DATA / f"{package(language)}.COPYRIGHT"


@cache
def good_pages(language: str = "es") -> tuple[tuple[str, str], ...]:
    """(source path in the GIMP manual, html) of every held-out good page in `language`."""
    with gzip.open(good_file(language), "rt", encoding="utf-8") as f:
        return tuple((r["source"], r["html"]) for r in map(json.loads, f))
