"""Build a sample corpus from Debian documentation packages (no root, no services).

`fetch_sample(dest, language="es")` runs `apt-get download PKG` and `dpkg -x` for each
package of that language's sample (SAMPLE_PACKAGES) and writes one shard per package,
`dest/<shard>/`, holding only document files. A shard is named after its package, except
debian-handbook-fr (the fr-FR pages of debian-handbook).

Spanish sample, "es" (the default; measured on bookworm's packages: files, MB on disk, MB
of text as the HTML extractor sees it, download MB):

    debian-handbook/      es-ES/apt.html, fr-FR/apt.html, ... HTML in 26 languages, the
                          language filter's test: 3,302 files, 62 MB, 22.6 MB text, 35 MB
    libreoffice-help-es/  es/text/shared/find_toolbar.html, ...: 2,561, 24 MB, 4.7, 3.3
    debian-reference-es/  ch06.es.html, ...: 15, 2.4 MB, 0.6, 1.8
    manpages-es/          man1/ls.1.txt, ... (roff rendered to plain UTF-8 by groff): 318,
                          2.4 MB, 2.4, 1.0
    fortunes-es/          vida.jsonl, ... (one {"text": ...} record per fortune): 25 files,
                          10,786 records, 1.1 MB, 0.3
    lilypond-doc-html-es/ notation/writing-rhythms.es.html, ... (split manuals, no big
                          pages): 539, 48 MB, 3.6, 1.8
    freedombox-doc-es/    Backups.part.html, ... (some pages untranslated, in English): 87,
                          1.0 MB, 0.4, 44 (mostly images)
    maint-guide-es/       first.es.html, ... (the guide split by chapter): 11, 0.4 MB, 0.2, 0.6
    aptitude-doc-es/      ch02s02.html, ... (the aptitude user manual): 89, 0.9 MB, 0.3, 0.4
    ubuntu-packaging-guide-html-es/  fixing-a-bug.html, ...: 17, 0.3 MB, 0.1, 0.1

In all 6,964 files, 142 MB, 19 s to build on a fast network. Left out: linuxcnc-doc-es (its
Spanish text is only in PDFs, 27 MB; its two text files are an English G-code table and a
stub) and kicad-doc-es 6.0 (English apart from one page, fastText: 5 of 6 manuals English,
behind a 12 MB download of screenshots).

French sample, "fr" (same columns; "English" is the share of text in lines of 80+
characters that fastText labels English, and pages whose middle it labels English):

    debian-handbook-fr/   fr-FR/apt.html, ... only the handbook's fr-FR pages: 127 files,
                          2.4 MB, 0.9 MB text, 35 MB download. The bookworm translation
                          (11.20220922) lags the English book: 41% English, mixed into
                          French pages paragraph by paragraph (37 pages mostly English)
    libreoffice-help-fr/  fr/text/scalc/01/04060101.html, ...: 2,561, 24 MB, 5.0, 3.2;
                          4% English (39 pages, the ScriptForge sf_* Basic library)
    gimp-help-fr/         gimp-tool-crop.html, ... (the GIMP 2.10 user manual, one folder):
                          685, 7.8 MB, 2.0, 52 (1,632 PNG + 337 JPEG screenshots); 22%
                          English (95 pages: appendices, the GFDL, newer filter pages)
    lilypond-doc-html-fr/ learning/tutorial.fr.html, ... (split manuals, no big pages): 544,
                          50 MB, 3.7, 1.9; 23% English or code (38 pages: snippets, the
                          GFDL in each manual, web/news)

In all 3,917 files, 84 MB, 12 MB of text, 92 MB downloaded, 14 s to build. Left out:
kicad-doc-fr 6.0.11 (it has a builder: `fetch_sample(dest, ["kicad-doc-fr"])`): five manuals
of one HTML page each, 1.1 MB of HTML, 0.5 MB of text behind a 15 MB download of 886
screenshots, and like kicad-doc-es only the headings are translated: 97% of its text is
English, only pl_editor.html (14 KB of text) is French.

Only documentation text is copied: HTML (no images, CSS, JS, PDFs) and, per package, no
second copy of the same text (LilyPond's one-file "big page" manuals, FreedomBox's
whole-manual pages, the Sphinx guide's reST `_sources/` and `singlehtml/`).

A shard is built in a dot-directory inside `dest` and renamed into place once complete, and
its marker `dest/<shard>/.complete` (JSON summary) is written before the rename; a shard
with a marker is not rebuilt. Corpus readers must skip dotfiles and dot-directories (the
marker, and `.tmp-*` build directories a killed run may leave behind).

The fetch itself lives in `pipelines.data.sample.debian`, the per-package builders (and
what each French package ships) in `pipelines.data.sample.builders`; this module drives
them shard by shard.
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
# imports them from this module (as bench/build_docs_eval.py does download_package and unpack_package).
from pipelines.data.sample.builders import (  # noqa: F401
    BUILDERS,
    SHARD_PACKAGE,
    build_fortunes,
    build_manpages,
    package_of,
    render_man_page,
    split_fortunes,
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
