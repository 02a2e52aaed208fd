"""Personal data: found, checked and replaced by typed placeholders before dedup, the
tokenizer and the token arrays see a document.

    r = Redactor(PiiConfig(), "es")   # cheap; holds plain configuration only
    r.find(text)                      # [Finding(kind, start, end)], every kind
    out = r.redact(text)              # Redaction(text, counts, drop)
    mask("john@gmail.com")            # "j***@g***.com", for display

Kinds (KINDS order; placeholders `<EMAIL>`, `<PHONE>`, ...):
- email: addresses, except documentation domains (RFC 2606/6761: example.com/.org/.net/
  .edu, *.example, *.test, *.invalid, *.localhost) and `PiiConfig.allow_domains` (email.py).
- phone: international (+NN, 00NN) numbers of any country and national numbers of the
  language's countries (or `PiiConfig.phone_regions`), valid and grouped as their region
  writes them, by libphonenumber; a national number written as one bare digit run needs
  a phone word before it ("tel", "móvil", "call") (phone.py).
- national_id: Spanish DNI/NIE, French NIR, Italian codice fiscale, Portuguese NIF (beside
  its name), US SSN (dashed or beside its name), in any language, check digits verified
  by python-stdnum (ids.py).
- iban (mod 97 and registry structure) and card (Luhn, issuer prefix and length)
  (finance.py).
- ip_address: globally routable IPv4/IPv6 addresses only, less public DNS resolvers,
  section-number-like and hand-typed example quads (network.py).
- credential: provider keys by prefix, private-key blocks, random-looking secrets after
  "password", "token", "clave", "mot de passe", "Passwort", "senha"... (credentials.py).

Actions per kind (PiiConfig): "redact" replaces the value with its placeholder; "keep"
leaves it (it is still found and counted); "drop_document" marks the document for the
rejected store (Redaction.drop, the first such kind in KINDS order) and replaces the value
too, so that no stored copy holds it in clear.

What stays, and why: every value is checked, not just shaped (check digits, number
validity, routability), so versions, dates, times, bug and order numbers, prices, hashes,
ISBNs and numbers with a wrong check digit keep their text. Documentation examples stay
because a manual's configuration example names nobody: example domains, private,
loopback, link-local and documentation IP ranges, `localhost` accounts, AWS's
AKIAIOSFODNN7EXAMPLE, the payment providers' test cards (4111 1111 1111 1111), the
example SSN 123-45-6789 and placeholders such as `<your-password>`, `${TOKEN}`,
`changeme`, `********`. Overlapping readings go to the most specific kind (kinds.PRIORITY:
credential > iban > card > national_id > email > phone > ip_address); nothing is replaced
twice.

Speed: the cost that matters is a clean page's. scan.py encodes each text once to
Latin-1 bytes and finds, with byte translations and literal searches, the few places a
value could be (digit clusters, long word runs, "@", keyword stems); the detectors run
their patterns and validators only there.
"""

from __future__ import annotations

from pipelines.data.pii.kinds import KINDS, PLACEHOLDERS, Finding
from pipelines.data.pii.mask import mask
from pipelines.data.pii.redact import Redaction, Redactor

__all__ = ["KINDS", "PLACEHOLDERS", "Finding", "Redaction", "Redactor", "mask"]
