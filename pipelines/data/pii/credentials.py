"""Credentials: API keys with a known prefix, private-key blocks, and secrets written
beside a word that names them ("password: ...", "clave=...", "mot de passe : ...").

A provider key is known by its documented prefix and a PEM private-key block is replaced
whole; a token after a keyword is a secret only when it looks random (`looks_secret`:
length, character classes, entropy), and names and code after a keyword are not.
Documentation placeholders and low-entropy example keys stay. The prefixes and
thresholds: docs/personal-data.md#how-each-kind-is-found.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator

from pipelines.data.pii.scan import Scan

_PREFIXED = re.compile(
    r"(?<![\w\-])(?:"
    r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36,251}"
    r"|github_pat_[A-Za-z0-9_]{22,251}"
    r"|xox[abposre]-[A-Za-z0-9\-]{10,250}"
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,247}"
    r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,200}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")(?![\w\-])",
    re.ASCII,
)
_PREFIX_LEN = re.compile(r"^(?:[A-Z]{4}|gh[pousr]_|github_pat_|xox.-|[sr]k_\w+?_|sk-(?:\w+-)?|AIza|)")

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# A cut-off block: header lines ("Proc-Type: ...") and base64 lines after BEGIN.
_PEM_BODY = re.compile(r"(?:\s*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z\-]+: [^\n]*))+")
_PEM_MAX = 20_000  # characters searched for the END line (an RSA-8192 block is ~6.5k)

# Words that name a secret, in the packs' languages (en, es, fr, de, pt, it, ca), as stems
# searched in the lower-cased text: "pass" is password, passwd, passphrase, Passwort and
# mot de passe; "key" is api key, apikey, access_key; "contras" is contraseña and
# contrasenya. They match inside identifiers too (DB_PASSWORD, aws_secret_access_key):
# the rest of the word is skipped before the separator.
_STEMS: tuple[bytes, ...] = tuple(
    s.encode("latin-1") for s in (
        "pass", "pwd", "secret", "token", "key", "clave", "contras", "mdp", "jeton", "clé",
        "kennwort", "senha", "chave", "chiave", "segreto", "parola d", "clau",
    )
)
# From the end of the keyword (and of the identifier around it) to the token: an explicit
# ":" / "=" / "is"-word, possibly after up to three short words ("la clave de la API es"),
# or a bare space before a token that must then be strongly random. Never across a line
# break: "-----BEGIN PUBLIC KEY-----" is followed by a public key on the next line.
_IDENT_TAIL = re.compile(r"[\w\-'’]*")
_ASSIGN = re.compile(
    r"(?:[ \t]+[\w'’]{1,12}){0,3}?(?:[\"']?[ \t]*(?::=|=>|[:=])[ \t]*|[ \t]+(?:is|es|est|ist"
    r"|é|è|era|was|war|était|vaut|sera|lautet)(?:[ \t]*:[ \t]*|[ \t]+))[\"'`]?(?=\S)",
    re.IGNORECASE,
)
_BARE = re.compile(r"[ \t]+[\"'`]?(?=\S)")
_TOKEN = re.compile(r"[^\s\"'`<>,;()\[\]{}]+")
_PLACEHOLDER = re.compile(
    r"example|your|change.?me|placeholder|redacted|dummy|secret|password|token|xxxx|\*\*\*"
    r"|\.\.\.|^\$\{\w+\}$|(?-i:^\$[A-Z_][A-Z0-9_]*$|^[A-Z_]+$)|^%\w+%$|^<.*>$|^\{\{.*\}\}$"
    r"|^\W+$",
    re.IGNORECASE,
)


def entropy(s: str) -> float:
    """Shannon entropy of `s` in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def _classes(s: str) -> int:
    lower = upper = digit = other = 0
    for ch in s:
        if ch.isdigit():
            digit = 1
        elif ch.islower():
            lower = 1
        elif ch.isupper():
            upper = 1
        else:
            other = 1
    return lower + upper + digit + other


# Code and configuration that follow a keyword without being a secret: an attribute path
# (`fs.readFileSync`), an assignment (`logits_cache=False`), a command-line flag.
_CODE = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$|^[A-Za-z_]\w*=|^-")
_NAME_PARTS = re.compile(r"[_\-.]|(?<=[a-z])(?=[A-Z])")
_NAME_PART = re.compile(r"[A-Za-z]{2,}\d?|\d{1,2}")
_MARKS = frozenset("_-.")


def _is_name(token: str) -> bool:
    """An identifier made of words: LIBPFM4_ARCH_FLAG, prompt_robustness,
    exportPublicKey, cs_CZ.UTF-8 (a random key splits into fragments that are no words)."""
    return all(_NAME_PART.fullmatch(p) for p in _NAME_PARTS.split(token) if p)


def looks_secret(token: str, bare: bool = False) -> bool:
    """Whether a token beside a keyword is a real secret rather than a placeholder, a name
    or code. Random keys (16+ characters, a digit, two classes, 3+ bits of entropy a
    character) always are; after ":" or "=", so is a shorter password with three classes
    (a digit or a symbol other than _ - . among them); after a bare space only a key is."""
    if not 8 <= len(token) <= 256 or _PLACEHOLDER.search(token) or "://" in token:
        return False
    if _CODE.search(token) or _is_name(token):
        return False
    if "/" in token and not re.search(r"[A-Za-z0-9+/]{20,}", token):
        return False  # a path, not base64
    classes, h = _classes(token), entropy(token)
    digit = any(ch.isdigit() for ch in token)
    if len(token) >= 16 and classes >= 2 and h >= 3.0 and digit:
        return True
    if bare or classes < 3 or h < 2.5:
        return False
    return digit or any(not ch.isalnum() and ch not in _MARKS for ch in token)


def _find_pem(scan: Scan) -> Iterator[tuple[int, int]]:
    text = scan.text
    for m in _PEM_BEGIN.finditer(text, max(0, scan.raw.find(b"-----BEGIN"))):
        end = _PEM_END.search(text, m.end(), m.end() + _PEM_MAX)
        if end is not None:
            yield m.start(), end.end()
        else:
            body = _PEM_BODY.match(text, m.end())
            yield m.start(), body.end() if body else m.end()


def _find_prefixed(scan: Scan) -> Iterator[tuple[int, int]]:
    # Every key is at least 20 characters of [A-Za-z0-9_-] from its first one on.
    for start, _ in scan.word_runs(20):
        m = _PREFIXED.match(scan.text, start)
        if m is None:
            continue
        key = m.group()
        prefix = _PREFIX_LEN.match(key)
        body = key[prefix.end():] if prefix else key
        if "EXAMPLE" in key.upper() or entropy(body) < 2.5:
            continue
        if key.startswith("sk-") and not (re.search(r"\d", body) and re.search(r"[A-Za-z]", body)):
            continue  # "sk-" before prose-like text
        yield m.start(), m.end()


# The word part a stem must be (an identifier split at _ - . and camelCase): "Keybindings"
# and "htpasswd" hold a stem and name no secret (both redacted a configuration path in the
# Spanish sample: Aptitude::UI::Keybindings, htpasswd's file argument).
_KEYWORDS = frozenset({
    "pass", "passe", "password", "passwords", "passwd", "passphrase", "passkey", "passwort", "pwd",
    "secret", "secrets", "secreto", "secretos", "token", "tokens", "key", "keys", "apikey", "apikeys",
    "clave", "claves", "contraseña", "contraseñas", "contrasena", "contrasenya", "contrasenyes", "mdp",
    "jeton", "jetons", "clé", "clés", "kennwort", "senha", "senhas", "chave", "chaves", "chiave", "chiavi",
    "segreto", "parola", "clau", "claus",
})


def _names_a_secret(text: str, at: int, stem: bytes) -> bool:
    """Is the word part holding the stem found at `at` a keyword (not "Keybindings")?"""
    start, end = at, at + len(stem.split(b" ")[0])
    while start > 0 and text[start - 1].isalpha() and not (text[start - 1].islower() and text[start].isupper()):
        start -= 1
    while end < len(text) and text[end].isalpha() and not (text[end - 1].islower() and text[end].isupper()):
        end += 1
    return text[start:end].lower() in _KEYWORDS


def _find_beside_keyword(scan: Scan) -> Iterator[tuple[int, int]]:
    text, lower = scan.text, scan.lower
    for stem in _STEMS:
        at = lower.find(stem)
        while at != -1:
            span = _secret_after(text, at + len(stem)) if _names_a_secret(text, at, stem) else None
            if span is not None:
                yield span
            at = lower.find(stem, at + len(stem))


def _secret_after(text: str, pos: int) -> tuple[int, int] | None:
    """The secret after a keyword that ends at `pos`, if one follows."""
    pos = _IDENT_TAIL.match(text, pos).end()
    sep = _ASSIGN.match(text, pos)
    bare = sep is None
    if bare:
        sep = _BARE.match(text, pos)
        if sep is None:
            return None
    tok = _TOKEN.match(text, sep.end())
    if tok is None:
        return None
    if text.startswith(("(", "["), tok.end()):
        return None  # a call or an index: code
    # A sentence's full stop or comma is not part of the secret.
    value = tok.group().rstrip(".,:;")
    return (tok.start(), tok.start() + len(value)) if looks_secret(value, bare) else None


def find_credentials(scan: Scan) -> Iterator[tuple[int, int]]:
    """(start, end) of each credential in the text; spans may overlap (a key inside a PEM
    block, a prefixed key after "token:"): kinds.resolve keeps the earliest, then longest."""
    if scan.raw.find(b"PRIVATE KEY") != -1:
        yield from _find_pem(scan)
    yield from _find_prefixed(scan)
    yield from _find_beside_keyword(scan)
