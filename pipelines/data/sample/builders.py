"""The sample corpus's shard builders: (unpacked package root, output dir, progress) ->
number of documents written, one builder per shard in BUILDERS.

A shard is named after its Debian package unless SHARD_PACKAGE says otherwise
(debian-handbook-fr: the fr-FR pages of debian-handbook). HTML packages are copied file by
file (HTML only, minus second copies of the same text), fortunes-es becomes one JSON
record per fortune, manpages-es is rendered to plain UTF-8 by groff. What each package
ships and what its builder keeps: docs/data.md#the-packages.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatch
from pathlib import Path

from tqdm import tqdm

from pipelines.data.sample.debian import SampleFetchError, require_tool

# The name these warnings carried before the builders moved out of sample.py.
log = logging.getLogger("pipelines.data.sample.fetch")

RENDER_WORKERS = 2  # the design target is a 2-core machine; groff is single-threaded


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
    base: str, package: str, skip: Sequence[str] = (), into: str = ""
) -> Callable[[Path, Path, bool], int]:
    """Copy the HTML under `base` into the shard (into its subfolder `into`, if given)."""

    def build(root: Path, out: Path, progress: bool) -> int:
        # Only HTML: images, CSS, JS, the PDF and the .ods examples carry no prose.
        src = _package_dir(root, base)
        return _copy_tree(src, out / into, (".html", ".htm"), progress, f"copy {package}", skip)

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


def build_fortunes(root: Path, out: Path, progress: bool) -> int:
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


def build_manpages(root: Path, out: Path, progress: bool) -> int:
    groff = require_tool("groff", "groff")
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
    "manpages-es": build_manpages,
    "fortunes-es": build_fortunes,
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
    # The French sample (see the module docstring for each package's layout). kicad-doc-fr
    # is not in it (mostly English), its builder is here for an explicit `packages=`.
    # fr-FR/ only: the other 25 languages stay in the Spanish sample's debian-handbook shard.
    "debian-handbook-fr": _html_builder(
        "usr/share/doc/debian-handbook/html/fr-FR", "debian-handbook-fr", into="fr-FR"
    ),
    "libreoffice-help-fr": _html_builder("usr/share/libreoffice/help", "libreoffice-help-fr"),
    "gimp-help-fr": _html_builder("usr/share/gimp/2.0/help/fr", "gimp-help-fr"),
    "kicad-doc-fr": _html_builder("usr/share/doc/kicad/help/fr", "kicad-doc-fr"),
    "lilypond-doc-html-fr": _html_builder(
        "usr/share/doc/lilypond/html/Documentation", "lilypond-doc-html-fr", ("*-big-page.*",)
    ),
}

# Shards built from a package of another name; every other shard is named after its package.
SHARD_PACKAGE: dict[str, str] = {"debian-handbook-fr": "debian-handbook"}


def package_of(shard: str) -> str:
    """The Debian package that `shard` is built from."""
    return SHARD_PACKAGE.get(shard, shard)
