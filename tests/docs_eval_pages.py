"""The good half of the held-out documentation set: Spanish GIMP manual pages chosen by
structure only, stored in `tests/data/docs_eval/gimp-help-es.jsonl.gz` (rebuilt by
bench/build_docs_eval.py). A module of its own so that the junk generators, which damage
these pages (mojibake), need not import the evaluation.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "docs_eval"
GOOD_FILE = DATA / "gimp-help-es.jsonl.gz"


@cache
def good_pages() -> tuple[tuple[str, str], ...]:
    """(source path in the GIMP manual, html) of every held-out good page."""
    with gzip.open(GOOD_FILE, "rt", encoding="utf-8") as f:
        return tuple((r["source"], r["html"]) for r in map(json.loads, f))
