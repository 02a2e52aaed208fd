"""Build the sample corpus from Debian documentation packages (no root, no services).

`fetch_sample(dest)` runs `apt-get download PKG` and `dpkg -x` for each package and writes
one shard per package, `dest/<package>/`, holding only document files:

    debian-handbook/      es-ES/apt.html, fr-FR/apt.html, ... (HTML in 26 languages)
    libreoffice-help-es/  es/text/shared/find_toolbar.html, ...
    debian-reference-es/  ch06.es.html, ...
    manpages-es/          man1/ls.1.txt, ... (roff rendered to plain UTF-8 by groff)
    fortunes-es/          vida.jsonl, ... (one {"text": ...} record per fortune)
    lilypond-doc-html-es/ notation/writing-rhythms.es.html, ... (split manuals, no big pages)
    freedombox-doc-es/    Backups.part.html, ... (some pages untranslated, in English)
    maint-guide-es/       first.es.html, ... (the guide split by chapter)
    aptitude-doc-es/      ch02s02.html, ... (the aptitude user manual)
    ubuntu-packaging-guide-html-es/  fixing-a-bug.html, ...

Only documentation text is copied: HTML (no images, CSS, JS, PDFs) and, per package, no
second copy of the same text (LilyPond's one-file "big page" manuals, FreedomBox's
whole-manual pages, the Sphinx guide's reST `_sources/` and `singlehtml/`). Left out:
linuxcnc-doc-es (its Spanish text is only in PDFs, 27 MB; its two text files are an English
G-code table and a stub) and kicad-doc-es 6.0 (English apart from one page, fastText: 5 of
6 manuals English, behind a 12 MB download of screenshots).

A shard is built in a dot-directory inside `dest` and renamed into place once complete, and
its marker `dest/<package>/.complete` (JSON summary) is written before the rename; a shard
with a marker is not rebuilt. Corpus readers must skip dotfiles and dot-directories (the
marker, and `.tmp-*` build directories a killed run may leave behind).

The fetch itself lives in `pipelines.data.sample_debian`, the per-package builders in
`pipelines.data.sample_builders`; this module drives them shard by shard.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

# The builders and text converters are also re-exported from here: tests/test_sample.py
# imports them from this module (as bench/build_docs_eval.py does _download and _unpack).
from pipelines.data.sample_builders import (  # noqa: F401
    BUILDERS,
    _build_fortunes,
    _build_manpages,
    render_man_page,
    split_fortunes,
)
from pipelines.data.sample_debian import SampleFetchError, _download, _require, _unpack

log = logging.getLogger(__name__)

DEFAULT_PACKAGES: tuple[str, ...] = (
    "debian-handbook",
    "libreoffice-help-es",
    "manpages-es",
    "fortunes-es",
    "debian-reference-es",
    "lilypond-doc-html-es",
    "freedombox-doc-es",
    "maint-guide-es",
    "aptitude-doc-es",
    "ubuntu-packaging-guide-html-es",
)
MARKER = ".complete"


# --- driver --------------------------------------------------------------------------


def _shard_stats(shard: Path) -> tuple[int, int]:
    files = [p for p in shard.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return len(files), sum(p.stat().st_size for p in files)


def _build_shard(package: str, dest: Path, progress: bool) -> dict:
    builder = BUILDERS[package]
    t0 = time.perf_counter()
    for stale in dest.glob(f".tmp-{package}-*"):  # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    # Inside dest (not /tmp) so the final rename is atomic on the same filesystem.
    with tempfile.TemporaryDirectory(prefix=f".tmp-{package}-", dir=dest) as tmp:
        work = Path(tmp)
        (work / "root").mkdir()
        out = work / "out"
        out.mkdir()
        deb = _download(package, work)
        version = _unpack(deb, work / "root")
        documents = builder(work / "root", out, progress)
        files, size = _shard_stats(out)
        if files == 0:
            raise SampleFetchError(f"{package} {version} produced no documents")
        summary = {
            "package": package,
            "version": version,
            "files": files,
            "documents": documents,
            "bytes": size,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        (out / MARKER).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        final = dest / package
        if final.exists():  # a folder without a marker: not ours to trust, replace it
            shutil.rmtree(final)
        os.rename(out, final)
    return summary


def fetch_sample(
    dest: Path, packages: Sequence[str] = DEFAULT_PACKAGES, progress: bool = True
) -> dict:
    """Fetch and build the sample corpus under `dest`, one shard per package.

    Returns {"dest", "shards": {package: {files, documents, bytes, version, seconds,
    cached}}, "files", "bytes"}. `documents` counts fortunes records, `files` counts files.
    Raises SampleFetchError with the fix (what to install or run) when a tool is missing or
    a download fails.
    """
    unknown = [p for p in packages if p not in BUILDERS]
    if unknown:
        raise SampleFetchError(f"no sample builder for {unknown}; known: {sorted(BUILDERS)}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    todo = [p for p in packages if not (dest / p / MARKER).is_file()]
    # Fail before downloading anything when a needed tool is missing.
    if todo:
        _require("apt-get", "apt")
        _require("dpkg", "dpkg")
    if "manpages-es" in todo:
        _require("groff", "groff")
    shards: dict[str, dict] = {}
    for package in packages:
        marker = dest / package / MARKER
        if package in todo:
            log.info("building sample shard %s", package)
            shards[package] = {**_build_shard(package, dest, progress), "cached": False}
        else:
            shards[package] = {**json.loads(marker.read_text(encoding="utf-8")), "cached": True}
    return {
        "dest": str(dest),
        "shards": shards,
        "files": sum(s["files"] for s in shards.values()),
        "bytes": sum(s["bytes"] for s in shards.values()),
    }
