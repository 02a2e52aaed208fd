"""Personal data: found, checked and replaced by typed placeholders before dedup, the
tokenizer and the token arrays see a document.

`Redactor(PiiConfig(), language)` finds every kind (`find`: e-mail, phone, national ID,
IBAN, card, public IP, credential; one module each) and applies each kind's action
(`redact`: "redact", "keep", or "drop_document", which still replaces the value); `mask`
shows a value for display. Every value is checked, not just shaped (check digits,
validity, routability), so look-alikes and documentation examples keep their text;
overlaps go to the most specific kind (kinds.PRIORITY). docs/personal-data.md.
"""

from __future__ import annotations

from pipelines.data.pii.kinds import KINDS, PLACEHOLDERS, Finding
from pipelines.data.pii.mask import mask
from pipelines.data.pii.redact import Redaction, Redactor

__all__ = ["KINDS", "PLACEHOLDERS", "Finding", "Redaction", "Redactor", "mask"]
