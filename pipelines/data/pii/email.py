"""E-mail addresses, except documentation ones.

Documentation domains stay (RFC 2606 and RFC 6761 reserve them for examples, so a
manual's `usuario@example.com` names nobody): example.com/.org/.net/.edu and their
subdomains, the .example, .test, .invalid and .localhost top-level domains (and .local,
multicast DNS's hosts), and the
domains a configuration adds (`PiiConfig.allow_domains`, with their subdomains). An
address needs a dotted domain with an alphabetic top-level label: `root@localhost` is
a machine account on every Unix host, not a person, and `icon@2x.png` or
`lodash@4.17.21` are a file name and a package pin. `git@github.com:user/repo.git` is
an SSH remote.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from pipelines.data.pii.scan import Scan

_RESERVED_DOMAINS = ("example.com", "example.org", "example.net", "example.edu")
_RESERVED_TLDS = ("example", "test", "invalid", "localhost", "local")
# File extensions that follow an "@2x"-style suffix in asset names.
_FILE_TLDS = frozenset({
    "png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "tif", "tiff", "pdf", "js",
    "css", "html", "htm", "json", "xml", "txt", "md", "py",
})

# Scanned only in a window around each "@" (see `find_emails`): a pattern that starts
# with a character class would be tried at every position of every page.
_ADDRESS = re.compile(
    r"(?<![\w.%+\-])([A-Za-z0-9_%+\-](?:[A-Za-z0-9_.%+\-]{0,62}[A-Za-z0-9_%+\-])?)"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24})(?![\w\-]|\.\w)",
    re.ASCII,
)


def _allowed(domain: str, allow: Iterable[str]) -> bool:
    domain = domain.lower()
    if domain.rsplit(".", 1)[-1] in _RESERVED_TLDS or domain.rsplit(".", 1)[-1] in _FILE_TLDS:
        return True
    for d in (*_RESERVED_DOMAINS, *allow):
        d = d.lower().strip(".")
        if domain == d or domain.endswith("." + d):
            return True
    return False


def find_emails(scan: Scan, allow_domains: Iterable[str] = ()) -> Iterator[tuple[int, int]]:
    """(start, end) of each address in the text whose domain is not a documentation one."""
    text = scan.text
    allow = tuple(allow_domains)
    at = scan.raw.find(b"@")
    last_end = -1
    while at != -1:
        hi = min(len(text), at + 260)
        m = _ADDRESS.search(text, max(0, at - 64), hi)
        while m is not None and m.end() <= at:
            m = _ADDRESS.search(text, m.end(), hi)
        if m is not None and m.start() <= at < m.end() and m.start() >= last_end:
            # "git@github.com:user/repo.git" is an SSH remote (scp syntax), not an address.
            remote = text.startswith(":", m.end()) and m.end() + 1 < len(text) and not text[
                m.end() + 1].isspace()
            if ".." not in m.group(1) and not remote and not _allowed(m.group(2), allow):
                yield m.start(), m.end()
            last_end = m.end()
        at = scan.raw.find(b"@", at + 1)
