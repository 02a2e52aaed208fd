"""Masked display of a found value: enough shape to tell what kind of value it was (an
address, a +34 number, an IBAN of Spain, a GitHub token), never enough to recover it."""

from __future__ import annotations

import re

# Prefixes that say what a value is without saying which one: a phone's country code, an
# IBAN's country, a provider's key prefix, a JWT's header marker.
_PREFIX = re.compile(
    r"^(?:\(?(?:\+|00)\d{1,3}\)?(?=[ .\-(])|[A-Z]{2}(?=\d{2}[ A-Z0-9]{10,}$)"
    r"|(?:AKIA|ASIA|gh[pousr]_|github_pat_|xox[a-z]-|[sr]k_(?:live|test)_|sk-|AIza|eyJ))"
)
_MAX_SHOWN = 32  # longer values (tokens, JWTs) are cut in the middle


_SEPARATORS = frozenset(" .-:/()")  # the shape: groups of a number, an address's dots


def _stars(body: str) -> str:
    """Every character hidden but separators and, in a body of 8 or more, the first and
    last letter or digit."""
    alnum = [i for i, ch in enumerate(body) if ch.isalnum()]
    keep = {alnum[0], alnum[-1]} if len(alnum) >= 8 else set()
    return "".join(ch if (i in keep or ch in _SEPARATORS) else "*" for i, ch in enumerate(body))


def mask(value: str) -> str:
    """A display form of `value`: "j***@e***.com", "+34 6** ** ** *8", "ES** **** ...",
    "ghp_a***...", "-----BEGIN RSA PRIVATE KEY----- *** -----END ...". At most two of its
    letters and digits are shown, besides a country code or key prefix."""
    value = value.strip()
    if "PRIVATE KEY-----" in value:
        head = value.split("-----", 2)
        kind = head[1] if len(head) > 1 else "PRIVATE KEY"
        return f"-----{kind}----- *** -----{kind.replace('BEGIN', 'END', 1)}-----"
    if "@" in value:
        local, _, domain = value.rpartition("@")
        tld = domain.rsplit(".", 1)[-1] if "." in domain else ""
        return f"{local[:1]}***@{domain[:1]}***" + (f".{tld}" if tld else "")
    m = _PREFIX.match(value)
    prefix = m.group() if m else ""
    shown = prefix + _stars(value[len(prefix):]) if value[len(prefix):] else prefix
    if len(shown) > _MAX_SHOWN:
        shown = shown[: _MAX_SHOWN - 6] + "…" + shown[-5:]
    return shown
