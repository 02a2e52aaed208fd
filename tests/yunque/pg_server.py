"""A real PostgreSQL server for tests: Debian's server binaries (`initdb`, `postgres`) on
a temp dir and a free loopback port, with a role that logs in by password and a database
it owns, as a deployment has them.

    def test_x(postgres_url): ...  # postgresql://yunque:...@127.0.0.1:PORT/yunque

`postgres_url` (the fixture, in tests/yunque/conftest.py) is one server and one database for the whole session; a test that needs
a database of its own (one Dagster instance per home) asks `new_database(postgres_url, name)`.
The URLs are libpq's (psycopg2.connect, psql), and Dagster's storage takes them as they
are (`dagster_url`): SQLAlchemy 2.1 opens a bare postgresql:// with psycopg 3, which
Yunque depends on for that reason.

initdb refuses to run as root: as root (CI, containers) the server runs as the `postgres`
system user (`nobody` where there is none) through `setpriv`, which execs, so the PID we
hold is the postmaster's. The server is stopped by that PID at teardown, always: SIGINT
(fast shutdown), then SIGKILL to its process group. No Unix socket is opened (only TCP on
127.0.0.1), so nothing is written outside the temp dir and no socket path is shared with
another server on the machine.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROLE, PASSWORD, DATABASE = "yunque", "yunque-test-pw", "yunque"
SUPERUSER_PASSWORD = "postgres-test-pw"
START_TIMEOUT_S = 30.0
# test settings: durability is worth nothing in a temp dir; Dagster's daemon, code servers and
# run workers each hold connections
SERVER_SETTINGS = {"listen_addresses": "127.0.0.1", "unix_socket_directories": "", "fsync": "off",
                   "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "200"}


def binaries() -> Path | None:
    """The directory holding `initdb` and `postgres`: the one on PATH, else the newest
    Debian version under /usr/lib/postgresql (Debian keeps them off PATH)."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name))
    candidates += reversed(versions)
    return next((d for d in candidates if (d / "initdb").exists() and (d / "postgres").exists()), None)


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def _server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: ourselves (None), or as root a system user initdb accepts."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    raise RuntimeError("running as root and neither a `postgres` nor a `nobody` user exists to run PostgreSQL")


def _as(user: pwd.struct_passwd | None) -> list[str]:
    return [] if user is None else ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]


def _owned_dir(base: Path, user: pwd.struct_passwd | None) -> tuple[Path, bool]:
    """A directory the server's user owns: `base/postgres`, or, where that user cannot reach
    `base` (pytest's temp dirs are 0700 root), a fresh one under the system temp dir.
    Returns it and whether it lies outside `base` (ours to remove)."""
    d = base / "postgres"
    d.mkdir(parents=True, exist_ok=True)
    if user is None:
        return d, False
    os.chown(d, user.pw_uid, user.pw_gid)
    if subprocess.run([*_as(user), "test", "-w", str(d)], check=False).returncode == 0:
        return d, False
    d = Path(tempfile.mkdtemp(prefix="yunque-pg-"))
    os.chown(d, user.pw_uid, user.pw_gid)
    return d, True


def _env() -> dict[str, str]:
    # inherited PG* variables (PGHOST, PGPORT, PGDATA...) must not point the tools elsewhere
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}


def _initdb(bindir: Path, data: Path, user: pwd.struct_passwd | None) -> None:
    pwfile = data.parent / "superuser.pw"
    pwfile.write_text(SUPERUSER_PASSWORD + "\n")
    if user is not None:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    try:
        done = subprocess.run([*_as(user), str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                               f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--locale=C",
                               "--no-sync"], env=_env(), capture_output=True, text=True, check=False)
    finally:
        pwfile.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def _start(bindir: Path, data: Path, user: pwd.struct_passwd | None, log: Path) -> tuple[subprocess.Popen, int]:
    """The postmaster on a free port, answering as the superuser; retried on another port
    when another process took the one we picked in between (the machine is shared)."""
    for _ in range(3):
        port = _free_port()
        settings = [a for k, v in SERVER_SETTINGS.items() for a in ("-c", f"{k}={v}")]
        with open(log, "a") as out:
            proc = subprocess.Popen([*_as(user), str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                                     *settings], env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        if _wait_ready(proc, port, log):
            return proc, port
    raise RuntimeError(f"PostgreSQL found no free port in 3 tries; server log {log}:\n{_tail(log)}")


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> bool:
    """True once the server accepts a login; False if it exited because the port was taken."""
    import psycopg2

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            if "could not bind" in _tail(log) or "already in use" in _tail(log):
                return False
            raise RuntimeError(f"PostgreSQL exited with code {proc.returncode}; server log {log}:\n{_tail(log)}")
        try:
            psycopg2.connect(_dsn(port, "postgres", SUPERUSER_PASSWORD, "postgres"), connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            pass
        if time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"PostgreSQL did not accept connections within {START_TIMEOUT_S:.0f} s; "
                               f"server log {log}:\n{_tail(log)}")
        time.sleep(0.2)


def _dsn(port: int, user: str, password: str, db: str) -> str:
    return f"postgresql://{user}:{password}@127.0.0.1:{port}/{db}"


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Fast shutdown (SIGINT: disconnect clients, write a checkpoint), then SIGKILL to the
    whole group (the postmaster's backends) if it hangs."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _create_role_and_database(port: int) -> None:
    import psycopg2

    conn = psycopg2.connect(_dsn(port, "postgres", SUPERUSER_PASSWORD, "postgres"))
    conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD %s", (PASSWORD,))
            cur.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
    finally:
        conn.close()


@contextmanager
def postgres_server(base: Path) -> Iterator[str]:
    """A PostgreSQL server for the duration of the block; yields the URL of a database
    owned by a password role, `postgresql://yunque:...@127.0.0.1:PORT/yunque`. Its files
    go under `base` (the server log: base/postgres.log)."""
    bindir = binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, postgres) on PATH or in /usr/lib/postgresql")
    user = _server_user()
    root, ours = _owned_dir(base, user)
    log = base / "postgres.log"  # opened by us and inherited: the server's user need not write to base
    proc = None
    try:
        _initdb(bindir, root / "data", user)
        proc, port = _start(bindir, root / "data", user, log)
        _create_role_and_database(port)
        yield _dsn(port, ROLE, PASSWORD, DATABASE)
    finally:
        if proc is not None:
            _stop(proc)
        if ours:
            shutil.rmtree(root, ignore_errors=True)


class PgServer:
    """A server of our own that a test may stop and start again on the same port (an
    outage); `url` is its database's."""

    def __init__(self, bindir: Path, data: Path, user: pwd.struct_passwd | None, log: Path):
        self.bindir, self.data, self.user, self.log = bindir, data, user, log
        self.proc, self.port = _start(bindir, data, user, log)
        _create_role_and_database(self.port)
        self.url = _dsn(self.port, ROLE, PASSWORD, DATABASE)

    def stop(self) -> None:
        _stop(self.proc)

    def start(self) -> None:
        """Again, on the same port."""
        settings = [a for k, v in SERVER_SETTINGS.items() for a in ("-c", f"{k}={v}")]
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen([*_as(self.user), str(self.bindir / "postgres"), "-D", str(self.data), "-p",
                                          str(self.port), *settings], env=_env(), stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if not _wait_ready(self.proc, self.port, self.log):
            raise RuntimeError(f"PostgreSQL could not take port {self.port} again:\n{_tail(self.log)}")


@contextmanager
def restartable_postgres(base: Path) -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own (`PgServer`), stopped at the end."""
    bindir = binaries()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, postgres): apt-get install postgresql")
    user = _server_user()
    root, ours = _owned_dir(base, user)
    server = None
    try:
        _initdb(bindir, root / "data", user)
        server = PgServer(bindir, root / "data", user, base / "postgres.log")
        yield server
    finally:
        if server is not None:
            _stop(server.proc)
        if ours:
            shutil.rmtree(root, ignore_errors=True)


def new_database(url: str, name: str) -> str:
    """A fresh database on the server of `url`, owned by its role; returns its URL."""
    import psycopg2

    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only")
    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
    finally:
        conn.close()
    return url.rsplit("/", 1)[0] + "/" + name


def dagster_url(url: str) -> str:
    """The URL for YUNQUE_DAGSTER_POSTGRES_URL (Dagster's postgres_url): the same one, as
    a user writes it (it needs psycopg 3 installed: see yunque.env._check_driver)."""
    return url

