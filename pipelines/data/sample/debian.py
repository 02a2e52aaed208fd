"""Fetch and unpack one Debian package without root: `apt-get download` and `dpkg -x`.

The sample corpus (`pipelines.data.sample.fetch`) builds every shard from a package fetched
here; bench/build_docs_eval.py fetches gimp-help-es the same way. Every failure is a
SampleFetchError whose message says what to install or run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

OWN_DATA = (
    "Or skip the sample and point `yunque run --corpus DIR` at your own data "
    "(a folder with one subdirectory per shard)."
)


class SampleFetchError(RuntimeError):
    """The sample corpus could not be fetched; the message says what to install or run."""


def require_tool(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SampleFetchError(
            f"`{tool}` is not on PATH; the sample corpus needs it (Debian/Ubuntu: "
            f"`apt-get install {package}`). {OWN_DATA}"
        )
    return path


def download_package(package: str, workdir: Path) -> Path:
    """`apt-get download` into `workdir` (needs apt lists, not root); returns the .deb."""
    apt = require_tool("apt-get", "apt")
    proc = subprocess.run(
        [apt, "download", "-q", package], cwd=workdir, capture_output=True, text=True, check=False
    )
    debs = sorted(workdir.glob(f"{package}_*.deb"))
    if proc.returncode != 0 or not debs:
        err = (proc.stderr or proc.stdout).strip()
        hint = (
            "the apt package lists are missing or stale: run `sudo apt-get update` first"
            if "Unable to locate" in err or "has no installation candidate" in err
            else "check the network and apt sources (`sudo apt-get update`)"
        )
        raise SampleFetchError(f"`apt-get download {package}` failed ({hint}).\n{err}\n{OWN_DATA}")
    return debs[-1]


def unpack_package(deb: Path, root: Path) -> str:
    """`dpkg -x` (plain extraction, no root, no maintainer scripts); returns the version."""
    dpkg = require_tool("dpkg", "dpkg")
    dpkg_deb = require_tool("dpkg-deb", "dpkg")  # `dpkg -x` delegates to dpkg-deb
    try:
        subprocess.run([dpkg, "-x", str(deb), str(root)], check=True, capture_output=True)
        version = subprocess.run(
            [dpkg_deb, "-f", str(deb), "Version"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except subprocess.CalledProcessError as e:
        raise SampleFetchError(f"`dpkg -x {deb.name}` failed: {e.stderr!r}") from e
    return version
