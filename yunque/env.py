"""The CLI's environment: telemetry off (`resources.telemetry`), and one home for Yunque's outputs
and the Dagster instance."""

import hashlib
import os
import sys
from pathlib import Path

from resources.telemetry import TELEMETRY_OFF, apply
from stages.store.location import home, home_url

__all__ = ["POSTGRES_URL", "TELEMETRY_OFF", "apply", "home", "home_url", "use_home"]

# Set, it selects the Postgres profile; Dagster reads it from the environment itself.
POSTGRES_URL = "YUNQUE_DAGSTER_POSTGRES_URL"
URL_FORM = "postgresql://user:password@host:port/db"
_REPO = Path(__file__).resolve().parents[1]
SQLITE_PROFILE = _REPO / "dagster.yaml"
POSTGRES_PROFILE = _REPO / "deploy" / "postgres" / "dagster.yaml"
_MINIMAL = "telemetry:\n  enabled: false\n"  # if the repository's dagster.yaml is not installed
# sha256 (first 16 hex digits) of earlier versions of deploy/postgres/dagster.yaml: a home
# holding one of them, as we wrote it, gets the current profile (storage that rides out
# a database outage, the run queue read every second)
EARLIER_POSTGRES_PROFILES = {"e97086e5065422f4", "2afa2b14487515a9", "3095b2d9e7827f84"}
# ... and of earlier versions of our sqlite dagster.yaml: such a home gets the current one
# (the same files, kept connections to the event log), with or without the Postgres variable
EARLIER_SQLITE_PROFILES = {"27d253c9c680f50c", "6a7782a0a14daf27", "97f2a975126f14a0", "d8a191888c15eaeb",
                           "ef476d5a3448157a"}


def use_home(path: str | Path | None = None) -> Path:
    """Point YUNQUE_HOME and DAGSTER_HOME at one place (`$YUNQUE_HOME/dagster`) and give
    the instance our dagster.yaml: sqlite (telemetry off, run limits), or the Postgres
    profile of deploy/postgres when YUNQUE_DAGSTER_POSTGRES_URL is set. A dagster.yaml
    edited by hand is left alone (see `_instance_settings`)."""
    apply()
    if path:  # a URL (s3://bucket/prefix: the home on an object store) stays a URL
        os.environ["YUNQUE_HOME"] = str(path) if "://" in str(path) else str(Path(path).absolute())
    h = home()  # the local root: the home, or the local cache of a remote one
    if "://" not in os.environ.get("YUNQUE_HOME", ""):
        os.environ["YUNQUE_HOME"] = str(h)
    dagster_home = h / "dagster"
    dagster_home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    _instance_settings(dagster_home / "dagster.yaml")
    return h


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else _MINIMAL


def _instance_settings(target: Path) -> None:
    """Write the dagster.yaml the environment asks for. Absent, exactly our sqlite file, or
    an earlier version of one of our profiles, it becomes the Postgres profile when
    YUNQUE_DAGSTER_POSTGRES_URL is set, else our current sqlite file; any other file
    is the user's, left as it is (with a warning when the variable is set and the file does
    not read it). A file that reads the variable while it is unset, or a URL the installed
    drivers cannot open, stops here in words instead of in every Dagster process."""
    url = os.environ.get(POSTGRES_URL)
    current = target.read_text() if target.exists() else None
    earlier_sqlite = _digest(current) in EARLIER_SQLITE_PROFILES
    ours = current in (None, _read(SQLITE_PROFILE), _MINIMAL) or earlier_sqlite or \
        _digest(current) in EARLIER_POSTGRES_PROFILES
    if url and ours:
        current = POSTGRES_PROFILE.read_text()
        target.write_text(current)
    elif current is None or earlier_sqlite:
        current = _read(SQLITE_PROFILE)
        target.write_text(current)
    if POSTGRES_URL not in current:
        if url:
            print(f"yunque: {POSTGRES_URL} is set, but {target} was edited by hand and does not read it: "
                  "the instance keeps that file's storage", file=sys.stderr)
    elif not url:
        raise SystemExit(f"yunque: the Dagster instance of {target} is on PostgreSQL and expects {POSTGRES_URL} "
                         f"({URL_FORM}); set it, or delete that file to go back to a fresh sqlite instance")
    else:
        _check_driver(url)


def _digest(text: str | None) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text is not None else ""


def _check_driver(url: str) -> None:
    """SQLAlchemy has no postgres:// scheme (Heroku-style URLs), and Dagster's storage
    works with psycopg2 only (SQLAlchemy 2.0, pinned, opens postgresql:// with it)."""
    scheme = url.partition("://")[0]
    if scheme in ("postgres", "postgresql+psycopg"):
        raise SystemExit(f"yunque: {POSTGRES_URL} starts {scheme}://, which the installed drivers cannot "
                         f"open: write {URL_FORM}")


apply()
