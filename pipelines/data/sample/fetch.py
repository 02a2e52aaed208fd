"""Build a sample corpus from Debian documentation packages (no root, no services).

`fetch_sample(dest, language="es")` runs `apt-get download` and `dpkg -x` for each package
of that language's sample (SAMPLE_PACKAGES) and writes one shard per package,
`dest/<shard>/`, holding only documentation text. A shard is built in a dot-directory and
renamed into place once complete, its `.complete` marker written first; a marked shard is
not rebuilt, and corpus readers skip dotfiles and dot-directories. The fetch is
`pipelines.data.sample.debian`, the builders `pipelines.data.sample.builders`; the
packages and their sizes: docs/data.md#the-packages.
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

from pipelines.data.sample.builders import (
    BUILDERS,
    package_of,
)
from pipelines.data.sample.debian import (
    OWN_DATA,
    SampleFetchError,
    download_package,
    require_tool,
    unpack_package,
)

log = logging.getLogger(__name__)

# The shards of each language's sample, keyed by ISO 639-1 code. A shard is named after
# the Debian package it is built from, except debian-handbook-fr (see SHARD_PACKAGE).
SAMPLE_PACKAGES: dict[str, tuple[str, ...]] = {
    "es": (
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
    ),
    # Not kicad-doc-fr: 97% English behind a 15 MB download of screenshots (see above).
    "fr": (
        "debian-handbook-fr",
        "libreoffice-help-fr",
        "gimp-help-fr",
        "lilypond-doc-html-fr",
    ),
}
DEFAULT_LANGUAGE = "es"
DEFAULT_PACKAGES: tuple[str, ...] = SAMPLE_PACKAGES[DEFAULT_LANGUAGE]
MARKER = ".complete"


# --- driver --------------------------------------------------------------------------


def _shard_stats(shard: Path) -> tuple[int, int]:
    files = [p for p in shard.rglob("*") if p.is_file() and not p.name.startswith(".")]
    return len(files), sum(p.stat().st_size for p in files)


def _build_shard(shard: str, dest: Path, progress: bool) -> dict:
    builder = BUILDERS[shard]
    package = package_of(shard)
    t0 = time.perf_counter()
    prefix = f".tmp-{shard}-"
    for stale in dest.glob(f"{prefix}*"):  # left by a killed run
        # tempfile's random suffix has no "-": debian-handbook's glob also matches
        # debian-handbook-fr's build dirs, which are not its to remove.
        if "-" not in stale.name[len(prefix) :]:
            shutil.rmtree(stale, ignore_errors=True)
    # Inside dest (not /tmp) so the final rename is atomic on the same filesystem.
    with tempfile.TemporaryDirectory(prefix=prefix, dir=dest) as tmp:
        work = Path(tmp)
        (work / "root").mkdir()
        out = work / "out"
        out.mkdir()
        deb = download_package(package, work)
        version = unpack_package(deb, work / "root")
        documents = builder(work / "root", out, progress)
        files, size = _shard_stats(out)
        if files == 0:
            raise SampleFetchError(f"{shard} ({package} {version}) produced no documents")
        summary = {
            "shard": shard,
            "package": package,
            "version": version,
            "files": files,
            "documents": documents,
            "bytes": size,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        (out / MARKER).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        final = dest / shard
        if final.exists():  # a folder without a marker: not ours to trust, replace it
            shutil.rmtree(final)
        os.rename(out, final)
    return summary


def fetch_sample(
    dest: Path,
    packages: Sequence[str] | None = None,
    progress: bool = True,
    language: str = DEFAULT_LANGUAGE,
) -> dict:
    """Fetch and build the sample corpus under `dest`, one shard per package.

    `packages` are shard names (BUILDERS' keys); None means the sample of `language`,
    SAMPLE_PACKAGES[language]. Returns {"dest", "language", "shards": {shard: {package,
    version, files, documents, bytes, seconds, cached}}, "files", "bytes"}. `documents`
    counts fortunes records, `files` counts files. Raises SampleFetchError with the fix
    (what to install or run) when a tool is missing or a download fails, and when
    `language` has no sample or a shard no builder.
    """
    if language not in SAMPLE_PACKAGES:
        raise SampleFetchError(
            f"no sample corpus for language {language!r}; samples exist for: "
            f"{', '.join(sorted(SAMPLE_PACKAGES))}. {OWN_DATA}"
        )
    if packages is None:
        packages = SAMPLE_PACKAGES[language]
    unknown = [p for p in packages if p not in BUILDERS]
    if unknown:
        raise SampleFetchError(f"no sample builder for {unknown}; known: {sorted(BUILDERS)}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    todo = [p for p in packages if not (dest / p / MARKER).is_file()]
    # Fail before downloading anything when a needed tool is missing.
    if todo:
        require_tool("apt-get", "apt")
        require_tool("dpkg", "dpkg")
    if "manpages-es" in todo:
        require_tool("groff", "groff")
    shards: dict[str, dict] = {}
    for shard in packages:
        marker = dest / shard / MARKER
        if shard in todo:
            log.info("building sample shard %s", shard)
            shards[shard] = {**_build_shard(shard, dest, progress), "cached": False}
        else:
            shards[shard] = {**json.loads(marker.read_text(encoding="utf-8")), "cached": True}
    return {
        "dest": str(dest),
        "language": language,
        "shards": shards,
        "files": sum(s["files"] for s in shards.values()),
        "bytes": sum(s["bytes"] for s in shards.values()),
    }
