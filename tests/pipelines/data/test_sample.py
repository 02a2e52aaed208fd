"""Sample corpus builder: fortune splitting, man page rendering, each package's builder (the
Spanish and the French sample), error messages, idempotence.

Nothing here touches the network: `apt-get` is either absent from PATH or a tiny stand-in
script that copies a .deb the test built with `dpkg-deb --build`.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from pipelines.data.sample import fetch as sample
from pipelines.data.sample.builders import (
    BUILDERS,
    build_fortunes,
    build_manpages,
    render_man_page,
    split_fortunes,
)
from pipelines.data.sample.fetch import SampleFetchError, fetch_sample

needs_groff = pytest.mark.skipif(shutil.which("groff") is None, reason="groff not installed")
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")

MAN_PAGE = r""".\" -*- coding: UTF-8 -*-
.TH SALUDO 1 "2024" "Yunque" "Órdenes de usuario"
.SH NOMBRE
saludo \- imprime un saludo en español
.SH DESCRIPCIÓN
.B saludo
escribe «¡Hola, España!» en la salida estándar. Esta línea es deliberadamente larga para
que groff tenga que partirla en varias líneas; nunca debería cortar palabras como
internacionalización o configuración con guiones.
.TP
.BR \-v ", " \-\-verbose
muestra \fImás\fP información.
"""


def test_split_fortunes_records_and_separators() -> None:
    raw = b"Primera frase.\n\t\t-- Autor\n%\nSegunda\nen dos l\xc3\xadneas.\n%\n%\n\n%\n"
    assert split_fortunes(raw) == [
        "Primera frase.\n\t\t-- Autor",
        "Segunda\nen dos líneas.",
    ]
    # A leading "%" line and CRLF line endings do not create empty or broken records.
    assert split_fortunes(b"%\r\nuno\r\n%\r\ndos") == ["uno", "dos"]


def test_split_fortunes_mixed_encodings_become_valid_utf8() -> None:
    utf8 = "El niño comió piñones.".encode()
    latin1 = "La cigüeña voló a España.".encode("latin-1")
    cp1252 = "Dijo “basta” – y se fue.".encode("cp1252")
    records = split_fortunes(b"\n%\n".join([utf8, latin1, cp1252]))
    assert records == [
        "El niño comió piñones.",
        "La cigüeña voló a España.",
        "Dijo “basta” – y se fue.",
    ]
    for r in records:
        r.encode("utf-8")  # strict: no surrogates


def _fortunes_root(root: Path) -> None:
    base = root / "usr/share/games/fortunes/es"
    (base / "off").mkdir(parents=True)
    (base / "vida.fortunes").write_bytes("Vivir es fácil.\n%\nO no.\n".encode("latin-1"))
    (base / "vida.fortunes.dat").write_bytes(b"\x00\x00\x00\x02binary")
    os.symlink("vida.fortunes", base / "vida.fortunes.u8")  # alias: not a second shard file
    (base / "varios.fortunes-pre").write_text("Antes.\n", encoding="utf-8")
    (base / "off/varios.fortunes").write_text("Rot13 grkg.\n%\nZnf.\n", encoding="utf-8")


def test_fortunes_builder_skips_dat_symlinks_and_off(tmp_path: Path) -> None:
    _fortunes_root(tmp_path / "root")
    out = tmp_path / "out"
    out.mkdir()
    assert build_fortunes(tmp_path / "root", out, progress=False) == 3
    assert sorted(p.name for p in out.iterdir()) == ["varios-pre.jsonl", "vida.jsonl"]
    lines = (out / "vida.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["Vivir es fácil.", "O no."]


@needs_groff
def test_render_man_page_plain_utf8() -> None:
    text = render_man_page(MAN_PAGE)
    assert "NOMBRE" in text and "DESCRIPCIÓN" in text
    assert "«¡Hola, España!»" in text
    assert "-v, --verbose" in text and "más información" in text
    assert "\b" not in text and "\x1b" not in text  # no overstrike, no SGR escapes
    assert "internacionalización" in text and "configuración" in text  # no hyphenation
    # Left-aligned, not justified: no padding runs between words inside the paragraph.
    paragraph = text.split("DESCRIPCIÓN")[1].split("-v, --verbose")[0]
    assert not re.search(r"[^\s.]  +\S", paragraph), paragraph


@needs_groff
def test_manpages_builder_renders_skips_aliases_and_bad_pages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    man1 = tmp_path / "root/usr/share/man/es/man1"
    man1.mkdir(parents=True)
    (man1 / "saludo.1.gz").write_bytes(gzip.compress(MAN_PAGE.encode()))
    os.symlink("saludo.1.gz", man1 / "hola.1.gz")
    (man1 / "roto.1.gz").write_bytes(b"this is not gzip")
    out = tmp_path / "out"
    out.mkdir()
    assert build_manpages(tmp_path / "root", out, progress=False) == 1
    assert [p.name for p in (out / "man1").iterdir()] == ["saludo.1.txt"]
    assert "skipping man page man1/roto.1" in caplog.text


@pytest.mark.parametrize("language", sorted(sample.SAMPLE_PACKAGES))
def test_every_sample_shard_has_a_builder(language: str) -> None:
    shards = sample.SAMPLE_PACKAGES[language]
    assert set(shards) <= set(BUILDERS)
    assert len(set(shards)) == len(shards)


def test_default_packages_are_the_spanish_sample() -> None:
    assert sample.DEFAULT_PACKAGES == sample.SAMPLE_PACKAGES["es"]
    assert "debian-handbook" in sample.SAMPLE_PACKAGES["es"]  # all 26 languages: langid's test
    # The French handbook shard comes from the same package, under its own shard name.
    assert sample.package_of("debian-handbook-fr") == "debian-handbook"
    assert sample.package_of("gimp-help-fr") == "gimp-help-fr"


# Package layouts as the Debian packages (bookworm) ship them, trimmed to a few files each:
# (package, files in the .deb, the shard's files).
HTML_LAYOUTS = [
    (
        "lilypond-doc-html-es",
        "usr/share/doc/lilypond/html/Documentation/",
        ["notation/rhythms.es.html", "notation-big-page.es.html", "learning/tutorial.es.html",
         "pictures/note.png", "lilypond-manuals.css"],
        ["learning/tutorial.es.html", "notation/rhythms.es.html"],
    ),
    (
        "freedombox-doc-es",
        "usr/share/freedombox/manual/es/",
        ["Backups.part.html", "Manual.part.html", "freedombox-manual.part.html",
         "freedombox-manual.pdf", "images/backups.png"],
        ["Backups.part.html"],
    ),
    (
        "maint-guide-es",
        "usr/share/doc/maint-guide-es/",
        ["html/first.es.html", "html/index.es.html", "maint-guide.es.txt.gz", "maint-guide.es.pdf"],
        ["first.es.html", "index.es.html"],
    ),
    (
        "aptitude-doc-es",
        "usr/share/doc/aptitude/html/es/",
        ["ch01.html", "ch02s02.html", "aptitude.css", "images/tip.png"],
        ["ch01.html", "ch02s02.html"],
    ),
    (
        "ubuntu-packaging-guide-html-es",
        "usr/share/doc/ubuntu-packaging-guide-html-es/",
        ["fixing-a-bug.html", "index.html", "search.html", "_sources/fixing-a-bug.txt",
         "_static/jquery.js", "singlehtml/index.html", "searchindex.js", "copyright"],
        ["fixing-a-bug.html", "index.html"],
    ),
    # The Spanish sample's handbook shard keeps every language: the language filter's test.
    (
        "debian-handbook",
        "usr/share/doc/debian-handbook/html/",
        ["es-ES/apt.html", "fr-FR/apt.html", "en-US/apt.html", "es-ES/images/apt.png",
         "es-ES/Common_Content/css/common.css"],
        ["en-US/apt.html", "es-ES/apt.html", "fr-FR/apt.html"],
    ),
    # French sample (bookworm layouts).
    (
        "debian-handbook-fr",
        "usr/share/doc/debian-handbook/html/",
        ["fr-FR/apt.html", "fr-FR/index.html", "es-ES/apt.html", "en-US/apt.html",
         "de-DE/index.html", "fr-FR/images/apt.png", "fr-FR/Common_Content/css/common.css",
         "fr-FR/Common_Content/images/title_logo.svg"],
        ["fr-FR/apt.html", "fr-FR/index.html"],
    ),
    (
        "libreoffice-help-fr",
        "usr/share/libreoffice/help/",
        ["fr/text/shared/01/01010000.html", "fr/text/scalc/main0000.html", "fr/contents.js",
         "fr/bookmarks.js", "media/helpimg/fr/sheettabs.png", "media/files/scalc/fr/pivot.ods"],
        ["fr/text/scalc/main0000.html", "fr/text/shared/01/01010000.html"],
    ),
    (
        "gimp-help-fr",
        "usr/share/gimp/2.0/help/fr/",
        ["gimp-file-open.html", "index.html", "gimp-help.xml", "gimp-xrefs.xml",
         "images/menus/file/open.png", "images/tutorials/quickie-jpeg-orig.jpg",
         "css/gimp-help-screen.css", "fonts/Roboto.woff2"],
        ["gimp-file-open.html", "index.html"],
    ),
    (
        "kicad-doc-fr",
        "usr/share/doc/kicad/help/fr/",
        ["eeschema.html", "pcbnew.html", "images/fr/eeschema_main.png", "images/icons/add_arc.png"],
        ["eeschema.html", "pcbnew.html"],
    ),
    (
        "lilypond-doc-html-fr",
        "usr/share/doc/lilypond/html/Documentation/",
        ["learning/tutorial.fr.html", "notation/rhythms.fr.html", "notation-big-page.fr.html",
         "web-big-page.fr.html", "web/introduction.fr.html"],
        ["learning/tutorial.fr.html", "notation/rhythms.fr.html", "web/introduction.fr.html"],
    ),
]


@pytest.mark.parametrize(("package", "base", "files", "expected"), HTML_LAYOUTS, ids=lambda v: str(v)[:30])
def test_html_builders_copy_each_text_once(
    tmp_path: Path, package: str, base: str, files: list[str], expected: list[str]
) -> None:
    root, out = tmp_path / "root", tmp_path / "out"
    for rel in files:
        (root / base / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / base / rel).write_text(f"<p>{rel}</p>", encoding="utf-8")
    out.mkdir()
    assert BUILDERS[package](root, out, False) == len(expected)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == expected
    # The copy is byte-identical: the reader, not the builder, decodes and extracts.
    assert (out / expected[0]).read_text(encoding="utf-8") == f"<p>{_source(base, files, expected[0])}</p>"


def _source(base: str, files: list[str], out_rel: str) -> str:
    return next(f for f in files if f.endswith(out_rel))


def test_html_builder_says_when_the_layout_changed(tmp_path: Path) -> None:
    (tmp_path / "root/usr/share/doc/aptitude/html/en").mkdir(parents=True)  # no es/
    with pytest.raises(SampleFetchError, match="usr/share/doc/aptitude/html/es"):
        BUILDERS["aptitude-doc-es"](tmp_path / "root", tmp_path, False)


def test_missing_apt_get_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(SampleFetchError) as err:
        fetch_sample(tmp_path / "corpus", progress=False)
    msg = str(err.value)
    assert "apt-get" in msg and "apt-get install apt" in msg
    assert "yunque run --corpus DIR" in msg


def test_missing_groff_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = {name: shutil.which(name) for name in ("apt-get", "dpkg")}
    if not all(real.values()):
        pytest.skip("apt-get/dpkg not installed")
    # apt-get and dpkg are reachable, groff is not: the check fails before any download.
    bindir = _fake_bin(tmp_path, {n: f'exec "{p}" "$@"' for n, p in real.items()})
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(SampleFetchError, match="apt-get install groff"):
        fetch_sample(tmp_path / "corpus", packages=["manpages-es"], progress=False)


def _fake_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bindir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bindir


def test_unknown_package_is_rejected_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(SampleFetchError, match="no sample builder"):
        fetch_sample(tmp_path / "corpus", ["emacs"], False)  # positional, as before


def test_unknown_language_is_refused_with_the_languages_that_have_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # nothing may run
    with pytest.raises(SampleFetchError) as err:
        fetch_sample(tmp_path / "corpus", language="de", progress=False)
    msg = str(err.value)
    assert "'de'" in msg and "es, fr" in msg
    assert "yunque run --corpus DIR" in msg
    assert not (tmp_path / "corpus").exists()


def test_french_sample_downloads_the_french_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in apt-get logs each package asked for and fails: the first download is
    # the handbook package (for the debian-handbook-fr shard), under its Debian name.
    log = tmp_path / "asked"
    bindir = _fake_bin(
        tmp_path,
        {"apt-get": f'echo "$3" >> "{log}"; echo "E: Unable to locate package $3" >&2; exit 100',
         "dpkg": ""},
    )
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(SampleFetchError, match="apt-get download debian-handbook"):
        fetch_sample(tmp_path / "corpus", language="fr", progress=False)
    assert log.read_text().split() == ["debian-handbook"]
    assert sample.SAMPLE_PACKAGES["fr"] == (
        "debian-handbook-fr",
        "libreoffice-help-fr",
        "gimp-help-fr",
        "lilypond-doc-html-fr",
    )  # not kicad-doc-fr: 97% English


def test_download_failure_tells_to_run_apt_get_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = _fake_bin(
        tmp_path, {"apt-get": 'echo "E: Unable to locate package $3" >&2; exit 100', "dpkg": ""}
    )
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(SampleFetchError, match=r"apt-get update") as err:
        fetch_sample(tmp_path / "corpus", packages=["fortunes-es"], progress=False)
    assert "Unable to locate package fortunes-es" in str(err.value)
    assert not [p for p in (tmp_path / "corpus").iterdir()]  # no half shard, no temp dir


@needs_dpkg
def test_builds_shard_from_deb_then_is_idempotent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real (tiny) fortunes-es .deb, served by a stand-in `apt-get download`.
    pkg = tmp_path / "pkg"
    _fortunes_root(pkg)
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text(
        "Package: fortunes-es\nVersion: 9.9-1\nArchitecture: all\n"
        "Maintainer: Test <t@example.org>\nDescription: test\n"
    )
    deb = tmp_path / "fortunes-es_9.9-1_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(deb)], check=True, capture_output=True)
    bindir = _fake_bin(tmp_path, {"apt-get": f'cp "{deb}" .'})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    dest = tmp_path / "corpus"
    summary = fetch_sample(dest, packages=["fortunes-es"], progress=False)
    shard = summary["shards"]["fortunes-es"]
    assert shard["cached"] is False and shard["version"] == "9.9-1"
    assert (shard["files"], shard["documents"]) == (2, 3)
    assert sorted(p.name for p in dest.iterdir()) == ["fortunes-es"]  # temp dir is gone
    assert (dest / "fortunes-es" / sample.MARKER).is_file()

    # Second run: no tools needed at all, the marker is trusted.
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    again = fetch_sample(dest, packages=["fortunes-es"], progress=False)
    assert again["shards"]["fortunes-es"]["cached"] is True
    assert again["files"] == 2 and again["bytes"] == summary["bytes"]


def _deb(tmp_path: Path, package: str, files: dict[str, str]) -> Path:
    """A real (tiny) .deb of `package` holding `files` (path -> text)."""
    pkg = tmp_path / f"pkg-{package}"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Test <t@example.org>\nDescription: test\n"
    )
    deb = tmp_path / f"{package}_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(deb)], check=True, capture_output=True)
    return deb


@needs_dpkg
def test_handbook_french_shard_holds_only_fr_fr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    html = "usr/share/doc/debian-handbook/html"
    deb = _deb(
        tmp_path,
        "debian-handbook",
        {f"{html}/{lang}/apt.html": f"<p>{lang}</p>" for lang in ("fr-FR", "es-ES", "en-US")}
        | {f"{html}/fr-FR/images/apt.png": "png"},
    )
    bindir = _fake_bin(tmp_path, {"apt-get": f'[ "$3" = debian-handbook ] && cp "{deb}" .'})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    dest = tmp_path / "corpus"
    # A build dir a killed run of the French shard left behind, seen by debian-handbook's
    # clean-up glob: it is not the Spanish shard's to remove.
    stale = dest / ".tmp-debian-handbook-fr-abc123"
    stale.mkdir(parents=True)

    es = fetch_sample(dest, packages=["debian-handbook"], progress=False)
    assert es["shards"]["debian-handbook"]["files"] == 3  # every language, as before
    assert stale.is_dir()

    fr = fetch_sample(dest, packages=["debian-handbook-fr"], progress=False)
    shard = fr["shards"]["debian-handbook-fr"]
    assert (shard["package"], shard["shard"], shard["files"]) == (
        "debian-handbook", "debian-handbook-fr", 1
    )
    files = [p for p in (dest / "debian-handbook-fr").rglob("*") if p.is_file()]
    assert sorted(p.relative_to(dest).as_posix() for p in files) == [
        "debian-handbook-fr/.complete",
        "debian-handbook-fr/fr-FR/apt.html",
    ]
    assert sorted(p.name for p in dest.iterdir()) == ["debian-handbook", "debian-handbook-fr"]
