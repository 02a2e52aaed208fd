"""Public IP addresses (IPv4 and IPv6), judged by the standard `ipaddress` module.

Only globally routable addresses are personal data. What stays, since a manual's
configuration example is not anybody's address: private networks (10/8, 172.16/12,
192.168/16, fc00::/7), loopback, link-local, carrier-grade NAT, reserved and the
documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32),
multicast groups, and the public DNS resolvers every network guide names (8.8.8.8,
1.1.1.1, ...). IPv6 must further lie in the global unicast block 2000::/3 (`ipaddress`
calls unallocated space global, which would turn "a::b" into an address). A dotted quad
after "version", "v" or "release" is a version number ("version 1.2.3.4") and stays, and
so does one whose four parts are all below 32 ("11.13.3.1": a manual's section
numbering) or that repeats its parts ("123.123.123.123": typed for an example).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from pipelines.data.pii.scan import Scan, find_all

_IPV4 = re.compile(r"(?<![\w.\-])(?:\d{1,3}\.){3}\d{1,3}(?![\w\-]|\.\d)", re.ASCII)
_IPV6 = re.compile(
    r"(?<![\w:.\-])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"
    r"(?:(?<=:)\d{1,3}(?:\.\d{1,3}){3})?(?![\w:\-]|\.\w)",
    re.ASCII,
)
_VERSION = re.compile(
    r"(?:\bv|\bver\.?|\bversi[oó]n|\bversion|\brelease|\bbuild|\bfirmware)\s*[:.]?\s*$",
    re.IGNORECASE,
)
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


def _public_v4(raw: str) -> bool:
    """A global address that is not a section number or a made-up example: "11.13.3.1",
    all four parts below 32, numbers a manual's chapter (a random global address looks
    like that once in 4,000); "123.123.123.123" or "222.111.111.222", two distinct parts
    at most, is typed by hand for an example."""
    parts = raw.split(".")
    if all(int(part) < 32 for part in parts) or len(set(parts)) <= 2:
        return False
    return _public(raw)


# Public DNS resolvers (Google, Cloudflare, Quad9, OpenDNS): services every network guide
# names, nobody's address.
_SERVICES = frozenset({
    "8.8.8.8", "8.8.4.4", "1.1.1.1", "1.0.0.1", "9.9.9.9", "149.112.112.112",
    "208.67.222.222", "208.67.220.220", "2001:4860:4860::8888", "2001:4860:4860::8844",
    "2606:4700:4700::1111", "2606:4700:4700::1001", "2620:fe::fe", "2620:fe::9",
})


def _public(raw: str) -> bool:
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError:
        return False
    if addr.is_multicast or addr.compressed in _SERVICES:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return _public_v4(str(addr.ipv4_mapped))
        return addr in _GLOBAL_UNICAST and addr.is_global
    return addr.is_global


def find_ip_addresses(scan: Scan) -> Iterator[tuple[int, int]]:
    """(start, end) of each public IP address in the text."""
    text = scan.text
    for lo, hi in scan.digit_windows(4, before=4, after=4):
        for m in _IPV4.finditer(text, lo, hi):
            if _public_v4(m.group()) and not _VERSION.search(text, max(0, m.start() - 16), m.start()):
                yield m.start(), m.end()
    # An IPv6 address has two groups around a colon ("2a00:1450", "db8::1" has "b8::1"
    # whose "::" is caught too) or starts with "::".
    hits = find_all(scan.words, b"w:w") + find_all(scan.raw, b"::")
    for lo, hi in scan.around(hits, 40, 48):
        for m in _IPV6.finditer(text, lo, hi):
            if m.group().count(":") >= 2 and _public(m.group()):
                yield m.start(), m.end()
