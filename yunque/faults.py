"""An infrastructure fault (a full disk, a store or database out of reach) as the user
sees it: one line on stderr that says what failed and where, the traceback in a file
that line names, and exit status 2. Everything the command committed before it stays;
the same command resumes from there."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
import time
import traceback
from pathlib import Path

import sqlalchemy.exc

# What is the machine's or a service's fault rather than the input's or ours: the errors
# the stores and the instance raise when a disk, a bucket or a database fails.
INFRASTRUCTURE = (OSError, sqlite3.Error, sqlalchemy.exc.SQLAlchemyError)


def _is_infrastructure(e: BaseException) -> bool:
    if isinstance(e, INFRASTRUCTURE):
        return True
    # dagster-postgres wraps a lost connection in its own exception (a subclass of
    # Exception only); matched by name so that this module imports nothing of Dagster's
    return type(e).__name__ == "DagsterPostgresException"


# Less free space than this where the instance lives, and a database error is the full disk's
FULL_BYTES = 1 << 20


def full(path: Path | None) -> bool:
    """Whether the disk holding `path` has less than FULL_BYTES free."""
    try:
        return path is not None and shutil.disk_usage(path).free < FULL_BYTES
    except OSError:
        return False


def describe(e: BaseException, home: Path | None = None) -> str:
    """What failed, in words, with the path or the service it failed on."""
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return f"the disk is full{where}: free space there"
    if isinstance(e, (sqlite3.Error, sqlalchemy.exc.SQLAlchemyError)) or type(e).__name__ == "DagsterPostgresException":
        if isinstance(e, (sqlite3.Error, sqlalchemy.exc.OperationalError)) and full(home):
            # sqlite says "disk I/O error" or "database or disk is full" for ENOSPC
            return (f"the disk holding the Dagster instance ({home / 'dagster'}) is full "
                    f"({type(e).__name__}: {first}): free space there")
        return f"the Dagster instance's database failed ({type(e).__name__}: {first})"
    if isinstance(e, OSError):
        return f"{type(e).__name__}: {first}"
    return first


def _save(e: BaseException, home: Path | None) -> Path | None:
    """The traceback in the home's dagster/ folder, or the temporary directory when that
    cannot be written (a full disk); None when neither can."""
    name = f"yunque-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    text = "".join(traceback.format_exception(e))
    for folder in ([home / "dagster"] if home else []) + [Path(tempfile.gettempdir())]:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            return folder / name
        except OSError:
            continue
    return None


def report(command: str, e: BaseException, home: Path | None) -> int | None:
    """For an infrastructure fault: the line, the saved traceback, and status 2. None for
    any other error (it is raised as it is: a bug should show its traceback)."""
    import sys

    if not _is_infrastructure(e):
        return None
    saved = _save(e, home)
    where = f"traceback in {saved}" if saved else "the traceback could not be saved"
    print(f"yunque {command}: {describe(e, home)} ({where}). What was committed stays; run the same command again to "
          "resume.", file=sys.stderr)
    return 2
