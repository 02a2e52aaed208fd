"""The network guard (tests/socket_guard.py, installed by tests/conftest.py): a connection
beyond loopback is refused before any packet goes out and fails the test that made it,
in the pytest process and in the subprocesses tests start; loopback and Unix sockets work.

203.0.113.1 is TEST-NET-3 (RFC 5737), an address that is never routed: were the guard
off, a connect would hang until its timeout or fail with "unreachable", never succeed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.socket_guard import SITE_DIR

OUTSIDE = ("203.0.113.1", 9)
ROOT = Path(__file__).resolve().parents[1]


def _blocked(attempts: list[dict], what: str) -> bool:
    return any(what in a["what"] for a in attempts)


def _python(code: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_in_process_connects_beyond_loopback_are_refused(network_attempts):
    started = time.monotonic()
    with pytest.raises(OSError, match=r"socket guard: connect to 203\.0\.113\.1:9 blocked"):
        socket.create_connection(OUTSIDE, timeout=2)
    s = socket.socket()
    s.settimeout(2)
    with s, pytest.raises(OSError, match="203.0.113.1"):
        s.connect_ex(OUTSIDE)  # connect_ex returns errors as numbers, but not this one
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, pytest.raises(OSError, match="sendto 203.0.113.1"):
        u.sendto(b"x", OUTSIDE)
    with pytest.raises(OSError, match="name lookup of 'example.com'"):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(OSError, match="name lookup"):
        socket.gethostbyname("example.com")
    assert time.monotonic() - started < 1  # refused at once, not timed out on the wire
    attempts = network_attempts()
    for what in ("connect to 203.0.113.1:9", "sendto 203.0.113.1:9", "'example.com' (socket.getaddrinfo)",
                 "'example.com' (socket.gethostbyname)"):
        assert _blocked(attempts, what), (what, attempts)
    assert all(a["pid"] == os.getpid() for a in attempts)


def test_loopback_unix_sockets_and_binding_still_work(tmp_path, network_attempts):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for host in ("127.0.0.1", "localhost", socket.gethostname()):
            with socket.create_connection((host, port), timeout=5) as c:
                peer, _ = server.accept()
                c.sendall(b"hola")
                assert peer.recv(4) == b"hola"
                peer.close()
    if socket.has_ipv6:
        try:
            six = socket.create_server(("::1", 0), family=socket.AF_INET6)
        except OSError:
            six = None  # no IPv6 loopback on this machine
        if six is not None:
            with six, socket.create_connection(("::1", six.getsockname()[1]), timeout=5):
                six.accept()[0].close()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        a.bind(("127.0.0.1", 0))
        b.sendto(b"udp", a.getsockname())
        assert a.recv(3) == b"udp"
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen()
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(path)
            listener.accept()[0].close()
    with socket.socket() as wildcard:
        wildcard.bind(("0.0.0.0", 0))  # binding is a server's business, never blocked
    assert socket.getaddrinfo("localhost", 80) and socket.getaddrinfo("127.0.0.1", 80)
    assert network_attempts() == []


CONNECT_OUTSIDE = f"""
import socket, sys
try:
    socket.create_connection({OUTSIDE!r}, timeout=2)
except OSError as e:
    print(e)
    sys.exit(3)
"""


@pytest.mark.parametrize("env", ["inherited", "PYTHONPATH replaced", "built from scratch"])
def test_subprocesses_are_guarded_whatever_env_they_get(env, network_attempts):
    """Several tests (and torchrun, and Dagster) hand their children an env of their own;
    the guard goes with it."""
    given = {"inherited": None, "PYTHONPATH replaced": {**os.environ, "PYTHONPATH": str(ROOT)},
             "built from scratch": {"PATH": os.environ["PATH"]}}[env]
    p = _python(CONNECT_OUTSIDE, env=given)
    assert p.returncode == 3, p.stderr
    assert "socket guard: connect to 203.0.113.1:9 blocked" in p.stdout
    attempts = network_attempts()
    assert _blocked(attempts, "connect to 203.0.113.1:9") and all(a["pid"] != os.getpid() for a in attempts)


def test_grandchildren_are_guarded(network_attempts):
    """A guarded child passes the guard on, even to a child it gives an empty env."""
    spawn = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {CONNECT_OUTSIDE!r}], env={{}}).returncode)"
    p = _python(spawn, env={"PATH": os.environ["PATH"]})
    assert p.returncode == 3, p.stderr
    assert _blocked(network_attempts(), "connect to 203.0.113.1:9")


def test_subprocess_loopback_still_works(network_attempts):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        accepted = threading.Thread(target=lambda: server.accept()[0].sendall(b"ok"))
        accepted.start()
        code = f"import socket; print(socket.create_connection(('localhost', {port}), timeout=5).recv(2).decode())"
        p = _python(code)
        accepted.join(10)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    assert network_attempts() == []


def test_subprocess_sitecustomize_is_ours():
    """What makes the previous tests mean something: the children import our sitecustomize."""
    p = _python("import sitecustomize, sys; print(sitecustomize.__file__); print('_yunque_socket_guard' in sys.modules)",
                env={"PATH": os.environ["PATH"]})
    assert p.stdout.split() == [str(SITE_DIR / "sitecustomize.py"), "True"], p.stderr


SWALLOWING_TESTS = f"""
import socket, subprocess, sys

def test_swallows_the_error_in_process():
    try:
        socket.create_connection({OUTSIDE!r}, timeout=2)
    except OSError:
        pass  # "offline? carry on": the guard still fails the test

def test_swallows_the_error_in_a_subprocess():
    code = "import socket\\ntry:\\n    socket.create_connection({OUTSIDE!r}, timeout=2)\\nexcept OSError:\\n    pass"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0

def test_stays_on_loopback():
    socket.getaddrinfo("localhost", 80)
"""


def test_a_swallowed_error_still_fails_the_test(tmp_path):
    """In a pytest of its own with this conftest as a plugin: an attempt the code under
    test catches and ignores still fails its test, in the process and in a child."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(SWALLOWING_TESTS))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # -rN: no short summary, whose lines repeat the message only when the terminal is
    # wide enough (CI's is, a developer's may not be), so the count below is exact.
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rN", "-p", "tests.conftest", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "-c", os.devnull, "test_inner.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "2 failed, 1 passed" in out, out
    assert out.count("network access outside loopback during call") == 2, out
    for name in ("test_swallows_the_error_in_process", "test_swallows_the_error_in_a_subprocess"):
        assert f"_ {name} _" in out, out
    assert "connect to 203.0.113.1:9" in out
