"""The kinds of personal data, their placeholders, a finding's shape, and the order in
which overlapping findings are resolved."""

from __future__ import annotations

from typing import NamedTuple

# The order of the contract (and of PiiConfig's fields): a document dropped for several
# kinds is reported under the first one found in this order.
KINDS: tuple[str, ...] = (
    "email", "phone", "national_id", "iban", "card", "ip_address", "credential", "person",
)

PLACEHOLDERS: dict[str, str] = {kind: f"<{kind.upper()}>" for kind in KINDS}

# Overlaps go to the most specific reading: a private-key block or API key swallows any
# number inside it; an IBAN's digits could pass Luhn or look like a phone; a card number
# could look like a phone; an ID's digits could too; an address's local part can hold a
# phone number; an IP address is the loosest shape.
PRIORITY: tuple[str, ...] = (
    "credential", "iban", "card", "national_id", "email", "phone", "ip_address", "person",
)
RANK: dict[str, int] = {kind: i for i, kind in enumerate(PRIORITY)}


class Finding(NamedTuple):
    """One value in a text: its kind and its [start, end) character offsets."""

    kind: str
    start: int
    end: int


def resolve(found: list[Finding]) -> list[Finding]:
    """Non-overlapping findings sorted by start: where two overlap, the one whose kind
    comes first in PRIORITY wins (then the earlier, then the longer); the loser is dropped
    whole, never trimmed, so that no value is replaced twice or in part."""
    ordered = sorted(found, key=lambda f: (RANK[f.kind], f.start, f.start - f.end))
    kept: list[Finding] = []
    for f in ordered:
        if all(f.end <= k.start or f.start >= k.end for k in kept):
            kept.append(f)
    kept.sort(key=lambda f: f.start)
    return kept
