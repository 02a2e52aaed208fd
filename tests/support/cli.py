"""The `yunque` command as the tests run it: `yunque(...)` runs any subcommand (as
`python -m yunque.cli`), `run_cli` a small `yunque run` on a corpus, and `home_outputs`
what the data half left in a home, comparable across homes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.factory import SMALL_RUN
from tests.support.ui_server import REPO, YUNQUE, ui_env


def yunque(*args: str, env: dict | None = None, stdin: str | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m yunque.cli ARGS` in this environment plus `env`: the console script as a
    user runs it."""
    return subprocess.run([sys.executable, "-m", "yunque.cli", *args], check=False, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, input=stdin)


def run_cli(home: Path, corpus: Path, select: str | None, timeout: int = 900) -> subprocess.CompletedProcess:
    """`yunque run` on `corpus` with the small overrides (SMALL_RUN), `--select` if given,
    in the environment `yunque ui` tests give it."""
    cmd = [YUNQUE, "--home", str(home), "run", "--corpus", str(corpus), "--overrides", SMALL_RUN]
    cmd += ["--select", select] if select else []
    return subprocess.run(cmd, cwd=REPO, env=ui_env(home), capture_output=True, text=True, timeout=timeout, check=False)


def home_outputs(home: Path) -> dict[str, object]:
    """What the data half produced, comparable across homes: kept doc ids per shard and
    the token arrays' bytes."""
    import pyarrow.parquet as pq

    out = {}
    for part in sorted((home / "data" / "deduped_documents").glob("*/part-0.parquet")):
        out[f"deduped/{part.parent.name}"] = sorted(pq.read_table(part, columns=["doc_id"])["doc_id"].to_pylist())
    for arr in sorted((home / "data" / "token_shards").glob("*/*.bin")):
        out[f"tokens/{arr.parent.name}/{arr.name}"] = arr.read_bytes()
    return out
