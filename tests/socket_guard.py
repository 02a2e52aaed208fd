"""The test suite's network guard: any socket use that would leave the machine fails the
test that made it ("nothing downloads at run time", checked, not claimed).

Standard library only: the same file is loaded by tests/conftest.py in the pytest
process and, through tests/socket_guard_site/sitecustomize.py, at the start of every
Python subprocess the tests start (the yunque CLI, the Dagster daemon and its code
servers and runs, torchrun and its workers, MLflow's server).

How: a `sys.addaudithook` hook. CPython's `_socket` module raises an audit event before
it connects, sends to an address, or resolves a name, and an exception raised by the
hook aborts the operation before any packet goes out. Unlike patching `socket.socket`,
it sees every Python caller (connect, connect_ex, create_connection, asyncio, sendto and
sendmsg on UDP, getaddrinfo, gethostbyname, gethostbyaddr, getnameinfo), including code
that kept a reference to the original functions. It does not see sockets opened in C or
C++ (libpq, gRPC's core, PyTorch's TCPStore and gloo, llama.cpp): nothing at the Python
level can, short of running the tests in a network namespace (`unshare -rn`).

Allowed: Unix domain sockets and every non-IP family, loopback (127.0.0.0/8, ::1,
::ffff:127.x), the unspecified address (0.0.0.0, ::: Linux connects it to this machine),
the names "localhost", "*.localhost" and this machine's own hostname, numeric addresses
in name lookups (no DNS query is made for them), and binding anything (servers bind).

Each blocked attempt raises NetworkBlocked (an OSError, errno ENETUNREACH, as an offline
machine answers, so that libraries behave as they would offline) naming the address,
and is recorded: in the pytest process into a list, in a subprocess as a JSON line in
the file named by $YUNQUE_TEST_SOCKET_GUARD. tests/conftest.py fails the test in whose
setup, call or teardown an attempt was recorded, so an error a library swallows (a
retry loop, an "offline? use the cache" fallback) still fails it.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

NAME = "_yunque_socket_guard"  # its sys.modules key, one module per process (also in conftest, sitecustomize)
ENV_FILE = "YUNQUE_TEST_SOCKET_GUARD"  # where subprocesses append their attempts
SITE_DIR = Path(__file__).resolve().with_name("socket_guard_site")  # holds sitecustomize.py
_INET = (socket.AF_INET, socket.AF_INET6)


class NetworkBlocked(OSError):
    def __init__(self, what: str):
        super().__init__(errno.ENETUNREACH, f"socket guard: {what} blocked: tests may use loopback and Unix "
                                            "sockets only (tests/socket_guard.py)")


def _host(value) -> str | None:
    if isinstance(value, bytes | bytearray):
        return value.decode("ascii", "replace")
    return value if isinstance(value, str) else None


def _local_ip(text: str) -> bool | None:
    """True/False for a numeric address (loopback or unspecified, or not); None for a name."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 scope (%eth0) is no part of it
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or ip.is_unspecified or bool(mapped and (mapped.is_loopback or mapped.is_unspecified))


_own_hostname: str | None = None


def _local_name(name: str) -> bool:
    global _own_hostname
    n = name.rstrip(".").lower()
    if n in ("", "localhost") or n.endswith(".localhost"):
        return True
    if _own_hostname is None:
        _own_hostname = socket.gethostname().lower()  # audited, but not a lookup: allowed below
    return n == _own_hostname


def _local_host(host) -> bool:
    host = _host(host)
    if host is None:
        return True  # None: the wildcard (a server's getaddrinfo(None, port))
    numeric = _local_ip(host)
    return _local_name(host) if numeric is None else numeric


def _local_lookup(host) -> bool:
    """A name lookup that makes no DNS query: a numeric address or a local name."""
    host = _host(host)
    return host is None or _local_ip(host) is not None or _local_name(host)


def check(event: str, args: tuple) -> str | None:
    """What `event` would reach beyond this machine, in words; None when it stays local."""
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        sock, address = args[0], args[1]
        if address is None or getattr(sock, "family", None) not in _INET or not isinstance(address, tuple):
            return None  # a connected socket's sendmsg, AF_UNIX, netlink, ...
        if _local_host(address[0]):
            return None
        verb = {"socket.connect": "connect to", "socket.sendto": "sendto", "socket.sendmsg": "sendmsg to"}[event]
        return f"{verb} {_host(address[0])}:{address[1]}"
    if event in ("socket.getaddrinfo", "socket.gethostbyname"):
        return None if _local_lookup(args[0]) else f"name lookup of {_host(args[0])!r} ({event})"
    if event == "socket.gethostbyaddr":  # reverse DNS; getfqdn() asks it about our own hostname
        return None if _local_host(args[0]) else f"reverse lookup of {_host(args[0])} ({event})"
    if event == "socket.getnameinfo":
        sockaddr = args[0]
        if isinstance(sockaddr, tuple) and sockaddr and not _local_host(sockaddr[0]):
            return f"reverse lookup of {_host(sockaddr[0])} ({event})"
    return None


def file_sink(path: str) -> Callable[[dict], None]:
    def write(record: dict) -> None:
        with open(path, "a", encoding="utf-8") as f:  # one short line per write: appends stay whole
            f.write(json.dumps(record) + "\n")
    return write


# The sink receives each attempt; conftest points it at a list in the pytest process.
sink: Callable[[dict], None] | None = None
_installed = False


def _hook(event: str, args: tuple) -> None:
    # Called for every audit event of the process, so the common case returns at once.
    # What the hook itself does raises only events it lets pass (socket.gethostname, open).
    if not event.startswith("socket.") or (what := check(event, args)) is None:
        return
    record = {"what": what, "pid": os.getpid(), "argv": sys.argv[:4]}
    if sink is not None:
        try:
            sink(record)
        except Exception as e:  # noqa: BLE001 - a sink that fails must not hide the attempt
            print(f"socket guard: could not record {record}: {e!r}", file=sys.stderr)
    raise NetworkBlocked(what)


def install(new_sink: Callable[[dict], None] | None) -> None:
    """Start guarding this process (once: an audit hook cannot be removed) and send
    attempts to `new_sink` (a later call only changes the sink)."""
    global sink, _installed
    sink = new_sink
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


# Subprocesses: the guard travels as $YUNQUE_TEST_SOCKET_GUARD and SITE_DIR on
# $PYTHONPATH. A caller that passes its own env (PYTHONPATH replaced, or an environment
# built from scratch, as several tests and torchrun do) would drop them, so Popen puts
# them back into any env it is given; a guarded child does the same for its children.

def subprocess_env(env: dict | os._Environ, attempts: str) -> dict:
    env = dict(env)
    env[ENV_FILE] = attempts
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(SITE_DIR) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *paths])
    return env


_ENV_ARG = 10  # Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn, close_fds, shell, cwd, env)


def patch_popen(attempts: str) -> None:
    """Every subprocess.Popen from now on (subprocess.run, asyncio's subprocesses) starts
    its child guarded, reporting to `attempts`."""
    popen = subprocess.Popen
    original = popen.__dict__["__init__"]
    if getattr(original, "_socket_guard", None) == attempts:
        return
    original = getattr(original, "__wrapped__", original)

    def __init__(self, *args, **kwargs):
        if len(args) > _ENV_ARG:
            args = (*args[:_ENV_ARG], subprocess_env(args[_ENV_ARG] or os.environ, attempts), *args[_ENV_ARG + 1:])
        else:
            given = kwargs.get("env")
            if given is not None or os.environ.get(ENV_FILE) != attempts or \
                    str(SITE_DIR) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
                kwargs["env"] = subprocess_env(os.environ if given is None else given, attempts)
        original(self, *args, **kwargs)

    __init__.__wrapped__ = original
    __init__._socket_guard = attempts
    popen.__init__ = __init__
