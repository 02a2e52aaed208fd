"""human_preferences as a stage (no Dagster): the ratings people gave on the chat page
(`<home>/feedback`, pipelines.feedback.records) turned into training data, versioned.

    data/human_preferences/pairs.jsonl    preference pairs, for reward_model and dpo_model
    data/human_preferences/sft.jsonl      endorsed answers as conversations, for sft_model
    data/human_preferences/summary.json   the feedback version, counts, what each record gave

The version is a hash of the records, so the same ratings make the same version and the
post-training stages that read them (stages.training.post_train) retrain only when the
ratings changed; their lineage names it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pipelines.feedback import preferences, records
from stages.asset_names import HUMAN_PREFERENCES
from stages.store.outputs import DataStore, write_json, write_jsonl

PAIRS_FILE = "pairs.jsonl"
SFT_FILE = "sft.jsonl"
SUMMARY_FILE = "summary.json"
EMPTY = "none"  # the version with no ratings yet
CODE_VERSION = "1"  # bump when what a rating becomes changes (pipelines.feedback.preferences)


def feedback_dir(store: DataStore) -> Path:
    """Where `yunque serve` appends ratings: beside data/ in the home (its local root)."""
    return store.home / records.FEEDBACK_DIR


def _version(found: list[dict[str, Any]]) -> str:
    return preferences.version(found) if found else EMPTY


def _holds(store: DataStore, version: str) -> dict[str, Any] | None:
    """The materialized summary, if it is of these ratings (and whole)."""
    summary = read_summary(store)
    out = store.dir(HUMAN_PREFERENCES)
    current = (summary is not None and summary.get("code_version") == CODE_VERSION and summary["version"] == version
               and (out / PAIRS_FILE).exists() and (out / SFT_FILE).exists())
    return summary if current else None


def is_current(store: DataStore) -> bool:
    """Whether the materialized asset holds the ratings there are now (`yunque run`'s plan:
    stages.data.plan)."""
    return _holds(store, _version(records.read(feedback_dir(store)).records)) is not None


def build(store: DataStore) -> dict[str, Any]:
    """Read every rating, write the pairs and conversations, return the summary (`cached`:
    the asset already held these ratings, nothing written)."""
    found = records.read(feedback_dir(store))
    version = _version(found.records)
    if held := _holds(store, version):
        return {**held, "cached": True}
    data = preferences.convert(found.records)
    out = store.dir(HUMAN_PREFERENCES)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(data.pairs, out / PAIRS_FILE)
    write_jsonl(data.sft, out / SFT_FILE)
    summary = {"version": version, "code_version": CODE_VERSION,
               "ratings": len(found.records), "skipped_lines": [reason for _, reason in found.skipped],
               "newest": max((r["time"] for r in found.records), default=None),
               "feedback_dir": str(feedback_dir(store)), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               **data.summary()}
    write_json(out / SUMMARY_FILE, summary)  # last: the summary names files already whole
    store.publish(HUMAN_PREFERENCES)
    return {**summary, "cached": False}


def read_summary(store: DataStore) -> dict[str, Any] | None:
    store.sync(HUMAN_PREFERENCES)
    path = store.dir(HUMAN_PREFERENCES) / SUMMARY_FILE
    return json.loads(path.read_text()) if path.exists() else None


def waiting(store: DataStore, trained: int) -> dict[str, Any]:
    """The ratings no trained model holds yet, given that the current models were aligned
    on the first `trained` (stages.training.lineage.ratings_in_models): what the feedback
    sensor counts and human_preferences reports. Ratings are only ever appended, so the
    ones after the first `trained` are new. `by_model`: the waiting ratings' answers by the
    model version that wrote them."""
    found = records.read(feedback_dir(store)).records
    new = found[trained:]
    by_model = Counter(who for rec in new for who in {f"{a['model']} v{a['version']}" for a in rec["answers"]})
    return {"ratings": len(found), "trained": min(trained, len(found)), "waiting": len(new),
            "by_model": dict(sorted(by_model.items()))}


def for_stage(store: DataStore, stage: str) -> dict[str, Any] | None:
    """What a post-training stage reads of the materialized asset: {version, path, examples,
    ratings} (pairs for reward and DPO, conversations for SFT), or None when the asset is
    not materialized or holds nothing for this stage (then the run is what it was without
    feedback, same key)."""
    summary = read_summary(store)
    if not summary or stage not in ("sft", "reward", "dpo"):
        return None
    which, n = (SFT_FILE, summary["sft"]) if stage == "sft" else (PAIRS_FILE, summary["pairs"])
    if not n:
        return None
    return {"version": summary["version"], "path": str(store.dir(HUMAN_PREFERENCES) / which), "examples": n,
            "ratings": summary["ratings"]}
