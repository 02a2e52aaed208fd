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
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatch
from pathlib import Path

from tqdm import tqdm

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
RENDER_WORKERS = 2  # the design target is a 2-core machine; groff is single-threaded
_OWN_DATA = (
    "Or skip the sample and point `yunque run --corpus DIR` at your own data "
    "(a folder with one subdirectory per shard)."
)


class SampleFetchError(RuntimeError):
    """The sample corpus could not be fetched; the message says what to install or run."""


# --- external tools ------------------------------------------------------------------


def _require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SampleFetchError(
            f"`{tool}` is not on PATH; the sample corpus needs it (Debian/Ubuntu: "
            f"`apt-get install {package}`). {_OWN_DATA}"
        )
    return path


def _download(package: str, workdir: Path) -> Path:
    """`apt-get download` into `workdir` (needs apt lists, not root); returns the .deb."""
    apt = _require("apt-get", "apt")
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
        raise SampleFetchError(f"`apt-get download {package}` failed ({hint}).\n{err}\n{_OWN_DATA}")
    return debs[-1]


def _unpack(deb: Path, root: Path) -> str:
    """`dpkg -x` (plain extraction, no root, no maintainer scripts); returns the version."""
    dpkg = _require("dpkg", "dpkg")
    dpkg_deb = _require("dpkg-deb", "dpkg")  # `dpkg -x` delegates to dpkg-deb
    try:
        subprocess.run([dpkg, "-x", str(deb), str(root)], check=True, capture_output=True)
        version = subprocess.run(
            [dpkg_deb, "-f", str(deb), "Version"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except subprocess.CalledProcessError as e:
        raise SampleFetchError(f"`dpkg -x {deb.name}` failed: {e.stderr!r}") from e
    return version


# --- shard builders: (unpacked package root, output dir, progress) -> documents ---------


def _regular_files(base: Path, suffixes: Iterable[str]) -> list[Path]:
    # Symlinks are skipped: in these packages they are aliases of pages already present
    # (fortunes' *.u8, manpages' alias pages), i.e. exact duplicates.
    suffixes = tuple(suffixes)
    return sorted(
        p
        for p in base.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name.endswith(suffixes)
    )


def _package_dir(root: Path, rel: str) -> Path:
    if not (root / rel).is_dir():
        raise SampleFetchError(f"expected /{rel} in the package; has its layout changed?")
    return root / rel


def _copy_tree(
    base: Path,
    out: Path,
    suffixes: Sequence[str],
    progress: bool,
    desc: str,
    skip: Sequence[str] = (),
) -> int:
    """Copy the files under `base` ending in `suffixes`, except those whose path relative to
    `base` matches a `skip` glob ("*" also matches "/")."""
    files = [
        p
        for p in _regular_files(base, suffixes)
        if not any(fnmatch(p.relative_to(base).as_posix(), g) for g in skip)
    ]
    for src in tqdm(files, desc=desc, unit="file", disable=not progress):
        target = out / src.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    return len(files)


def _html_builder(
    base: str, package: str, skip: Sequence[str] = ()
) -> Callable[[Path, Path, bool], int]:
    def build(root: Path, out: Path, progress: bool) -> int:
        # Only HTML: images, CSS, JS, the PDF and the .ods examples carry no prose.
        return _copy_tree(
            _package_dir(root, base), out, (".html", ".htm"), progress, f"copy {package}", skip
        )

    return build


def _decode(raw: bytes) -> str:
    """UTF-8 when valid, else cp1252 (a superset of Latin-1 for text), else Latin-1.

    Never fails. The current fortunes-es and manpages-es are UTF-8; older releases and
    user-supplied files are often Latin-1.
    """
    for encoding in ("utf-8", "cp1252"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            pass
    return raw.decode("latin-1")


def split_fortunes(raw: bytes) -> list[str]:
    """Records of a fortune file: text between lines that hold only "%" (what strfile
    splits on, i.e. "\n%\n", also when two separators are adjacent). Each record is decoded
    on its own, so one Latin-1 record in a UTF-8 file does not garble the others."""
    records: list[list[bytes]] = [[]]
    for line in raw.split(b"\n"):
        if line.rstrip(b"\r") == b"%":
            records.append([])
        else:
            records[-1].append(line.rstrip(b"\r"))
    texts = (_decode(b"\n".join(r)).strip("\n").rstrip() for r in records)
    return [t for t in texts if t.strip()]


def _build_fortunes(root: Path, out: Path, progress: bool) -> int:
    base = _package_dir(root, "usr/share/games/fortunes/es")
    files = [
        p
        for p in _regular_files(base, ("",))
        # off/ holds the offensive fortunes, rot13-encoded: not readable Spanish.
        # *.dat are strfile indexes (binary).
        if "off" not in p.relative_to(base).parts and not p.name.endswith(".dat")
    ]
    docs = 0
    for src in tqdm(files, desc="split fortunes-es", unit="file", disable=not progress):
        records = split_fortunes(src.read_bytes())
        name = src.name.replace(".fortunes", "") or src.name  # varios.fortunes-pre -> varios-pre
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in records)
        docs += len(records)
    return docs


def render_man_page(source: str, groff: str = "groff", timeout: float = 60) -> str:
    """A roff man page as plain UTF-8 text (no bold/underline overstrikes, no escapes)."""
    # `.ad l`: left-aligned instead of justified (no runs of padding spaces); -rHY=0: no
    # hyphenation (no words split across lines). -K utf8: the input is already decoded by us.
    # -t: run tbl (some pages have tables). -P-cbou: grotty without SGR escapes and
    # without the backspace overstrikes it would otherwise use for bold/underline.
    proc = subprocess.run(
        [groff, "-K", "utf8", "-t", "-Tutf8", "-man", "-rHY=0", "-P-cbou"],
        input=(".ad l\n" + source).encode("utf-8"),
        capture_output=True,
        check=False,  # the exit status is turned into a message below
        timeout=timeout,
        env={**os.environ, "GROFF_NO_SGR": "1", "LC_ALL": "C.UTF-8"},
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode("utf-8", "replace").strip()[:500])
    text = proc.stdout.decode("utf-8", "replace")
    # Belt and braces: drop any "x\bx" overstrike a macro package still produced.
    while "\b" in text:
        text = text.replace("_\b", "").replace("\b", "")
    return text


def _build_manpages(root: Path, out: Path, progress: bool) -> int:
    groff = _require("groff", "groff")
    base = _package_dir(root, "usr/share/man/es")
    pages = _regular_files(base, (".gz",))

    def render(src: Path) -> bool:
        rel = src.relative_to(base).with_suffix("")  # man1/ls.1
        try:
            source = _decode(gzip.decompress(src.read_bytes()))
            if source.lstrip().startswith(".so "):  # an alias stub: the target is also here
                return False
            text = render_man_page(source, groff)
        except Exception as e:  # noqa: BLE001 - one bad page must not sink the shard
            log.warning("skipping man page %s: %s", rel, e)
            return False
        if not text.strip():
            log.warning("skipping man page %s: rendered to nothing", rel)
            return False
        target = out / f"{rel}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return True

    # Threads are enough: each one waits on its own groff process.
    with ThreadPoolExecutor(max_workers=RENDER_WORKERS) as pool:
        results = pool.map(render, pages)
        done = sum(
            tqdm(
                results,
                total=len(pages),
                desc="render manpages-es",
                unit="page",
                disable=not progress,
            )
        )
    return done


BUILDERS: dict[str, Callable[[Path, Path, bool], int]] = {
    "debian-handbook": _html_builder("usr/share/doc/debian-handbook/html", "debian-handbook"),
    "libreoffice-help-es": _html_builder("usr/share/libreoffice/help", "libreoffice-help-es"),
    "debian-reference-es": _html_builder("usr/share/debian-reference", "debian-reference-es"),
    "manpages-es": _build_manpages,
    "fortunes-es": _build_fortunes,
    # Each manual also comes as one "big page" holding all of its split pages again.
    "lilypond-doc-html-es": _html_builder(
        "usr/share/doc/lilypond/html/Documentation", "lilypond-doc-html-es", ("*-big-page.*",)
    ),
    # Manual.part.html and freedombox-manual.part.html each hold the whole manual again.
    "freedombox-doc-es": _html_builder(
        "usr/share/freedombox/manual/es", "freedombox-doc-es", ("*anual.part.html",)
    ),
    # html/ only: maint-guide.es.txt.gz is the same guide again as plain text.
    "maint-guide-es": _html_builder("usr/share/doc/maint-guide-es/html", "maint-guide-es"),
    "aptitude-doc-es": _html_builder("usr/share/doc/aptitude/html/es", "aptitude-doc-es"),
    # Sphinx output: _sources/ is the reST source (in English), singlehtml/ all pages again,
    # search.html an empty search form.
    "ubuntu-packaging-guide-html-es": _html_builder(
        "usr/share/doc/ubuntu-packaging-guide-html-es",
        "ubuntu-packaging-guide-html-es",
        ("_*", "singlehtml/*", "search.html"),
    ),
}


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
