"""The redactor: every detector over a text, overlaps resolved by priority, and each
kind's action (`PiiConfig`: redact, drop_document, keep) applied."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.config import PiiConfig
from pipelines.data.pii import names
from pipelines.data.pii.credentials import find_credentials
from pipelines.data.pii.email import find_emails
from pipelines.data.pii.finance import find_cards, find_ibans
from pipelines.data.pii.ids import find_national_ids
from pipelines.data.pii.kinds import KINDS, PLACEHOLDERS, Finding, resolve
from pipelines.data.pii.network import find_ip_addresses
from pipelines.data.pii.phone import find_phones, regions_for
from pipelines.data.pii.scan import Scan

ACTIONS = ("redact", "drop_document", "keep")


@dataclass(frozen=True)
class Redaction:
    """A text after redaction. `counts`: values found per kind (every action; kinds with
    none omitted); `drop`: the first kind in KINDS order whose action is drop_document and
    that was found, else None. The text is redacted for drop kinds too, so that a rejected
    document's stored copy never holds a value in clear."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)
    drop: str | None = None


class Redactor:
    """Finds and replaces personal data in the texts of one language's corpus.

    Holds only the configuration's plain values (actions, regions, allowed domains): cheap
    to build, picklable, safe to build once per process or once per shard."""

    def __init__(self, cfg: PiiConfig, language: str) -> None:
        self.actions: dict[str, str] = {}
        for kind in KINDS:
            action = getattr(cfg, kind)
            if action not in ACTIONS:
                raise ValueError(f"pii.{kind}: action {action!r} is not one of {ACTIONS}")
            self.actions[kind] = action
        self.language = language
        self.regions: tuple[str, ...] = regions_for(language, cfg.phone_regions)
        self.allow_domains: tuple[str, ...] = tuple(d.lower() for d in cfg.allow_domains)
        self.names = self.actions["person"] != "keep"  # a named-entity model reads every text
        if self.names:
            names.check(language)  # one line now, not deep inside the first shard

    def _persons(self, texts: list[str]) -> list[list[Finding]]:
        if not self.names:
            return [[] for _ in texts]
        return [[Finding("person", s, e) for s, e in spans] for spans in names.person_spans(texts, self.language)]

    def _spans(self, text: str, persons: list[Finding] | None = None) -> list[Finding]:
        scan = Scan(text)
        found = [Finding("credential", s, e) for s, e in find_credentials(scan)]
        found += [Finding("iban", s, e) for s, e in find_ibans(scan)]
        found += [Finding("card", s, e) for s, e in find_cards(scan)]
        found += [Finding("national_id", s, e) for s, e in find_national_ids(scan)]
        found += [Finding("email", s, e) for s, e in find_emails(scan, self.allow_domains)]
        # Phones are the costliest to check: digits already claimed by a kind that wins
        # overlaps are not read again.
        taken = [(f.start, f.end) for f in found]
        found += [Finding("phone", s, e) for s, e in find_phones(scan, self.regions, taken)]
        found += [Finding("ip_address", s, e) for s, e in find_ip_addresses(scan)]
        return found + (persons or [])

    def find(self, text: str, persons: list[Finding] | None = None) -> list[Finding]:
        """Every value in `text`, whatever its kind's action: non-overlapping (the kind
        first in kinds.PRIORITY wins an overlap), sorted by start. Person names only when
        `pii.person` is not keep (a model reads the text); `persons`: already found."""
        return resolve(self._spans(text, self._persons([text])[0] if persons is None else persons))

    def redact(self, text: str, persons: list[Finding] | None = None) -> Redaction:
        """`text` with each value of a redact or drop_document kind replaced by its
        placeholder (keep kinds left as written), its counts and its drop verdict."""
        findings = self.find(text, persons)
        if not findings:
            return Redaction(text)
        counts: dict[str, int] = {}
        parts: list[str] = []
        last = 0
        for f in findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
            if self.actions[f.kind] == "keep":
                continue
            parts.append(text[last:f.start])
            parts.append(PLACEHOLDERS[f.kind])
            last = f.end
        parts.append(text[last:])
        drop = next(
            (k for k in KINDS if k in counts and self.actions[k] == "drop_document"), None
        )
        return Redaction("".join(parts), {k: counts[k] for k in KINDS if k in counts}, drop)

    def redact_many(self, texts: list[str]) -> list[Redaction]:
        """`redact` of each text, in order (person names found in batches)."""
        return [self.redact(t, p) for t, p in zip(texts, self._persons(texts))]
