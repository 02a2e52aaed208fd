"""Training data from human ratings (no torch, no Dagster), in the conventional formats of
pipelines.tasks.post_data, so the reward model, DPO and SFT read them as they read a user's
file.

    preference pairs   a compare with a winner: (winner, loser); an edited answer: (edited,
                       each shown answer), since it is what the person wanted instead
    SFT conversations  the conversation with the answer the person endorsed: the edited
                       answer if there is one, else the winner of a compare or an answer
                       rated up

A tie, "both bad" without an edit, and a thumbs-down without an edit teach neither (they
are counted, not dropped silently). The same pair or conversation from several records is
kept once.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

WINNER = {"a": 0, "b": 1}


@dataclass
class HumanData:
    pairs: list[dict[str, Any]] = field(default_factory=list)  # {"prompt": [...], "chosen": str, "rejected": str}
    sft: list[dict[str, Any]] = field(default_factory=list)  # {"messages": [...]}
    counts: Counter = field(default_factory=Counter)  # records by what they gave
    models: Counter = field(default_factory=Counter)  # answers by "model version"

    def summary(self) -> dict[str, Any]:
        return {"pairs": len(self.pairs), "sft": len(self.sft), "records": dict(sorted(self.counts.items())),
                "models": dict(sorted(self.models.items()))}


def _key(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def convert(records: list[dict[str, Any]]) -> HumanData:
    out, seen = HumanData(), set()

    def keep(bucket: list, item: dict) -> None:
        k = _key(item)
        if k not in seen:
            seen.add(k)
            bucket.append(item)

    for rec in records:
        prompt = rec["messages"]
        texts = [a["text"] for a in rec["answers"]]
        for a in rec["answers"]:
            out.models[f"{a['model']} v{a['version']}"] += 1
        edited, choice = rec.get("edited"), rec["choice"]
        given = []
        if choice in WINNER:
            win = WINNER[choice]
            if texts[win] != texts[1 - win]:  # two identical answers order nothing
                keep(out.pairs, {"prompt": prompt, "chosen": texts[win], "rejected": texts[1 - win]})
                given.append("pair")
        if edited:
            for t in texts:
                if t != edited:
                    keep(out.pairs, {"prompt": prompt, "chosen": edited, "rejected": t})
            given.append("edited")
        endorsed = edited or (texts[WINNER[choice]] if choice in WINNER else texts[0] if choice == "up" else None)
        if endorsed and endorsed.strip():
            keep(out.sft, {"messages": [*prompt, {"role": "assistant", "content": endorsed}]})
            given.append("sft")
        out.counts["+".join(given) if given else f"{rec['kind']}:{choice} (nothing to learn)"] += 1
    return out


def version(records: list[dict[str, Any]]) -> str:
    """The feedback version: a hash of the records (their ids and content, in order of id),
    so the same ratings give the same version wherever they were read."""
    return _key(sorted(({k: v for k, v in r.items() if k != "time"} for r in records), key=lambda r: r["id"]))[:16]
