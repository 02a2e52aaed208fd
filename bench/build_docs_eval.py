"""Build the held-out documentation test set: pages of the GIMP manual in one language.

    python -m bench.build_docs_eval [--language es|fr] [--deb gimp-help-<lang>_*.deb]
                                    [--out tests/data/docs_eval] [--target 130]

One package per language (LANGUAGES), neither a sample-corpus package. Pages are chosen
by structure only, never by what our cleaning, language ID or filters say, which would
make the test circular; about --target of them. Writes `<package>.jsonl.gz` and
`<package>.COPYRIGHT`; without --deb the package comes from `apt-get download`. The rules:
docs/data.md#quality-filters ("The held-out documentation set").
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

# gimp-help-<lang>'s /usr/share/doc entry is a symlink to gimp-help-common's; this is the
# licence that file states (Debian's copyright file of source package gimp-help 2.10.34-2).
COPYRIGHT = """\
Pages in {package}.jsonl.gz: a deterministic subset of the {name} GIMP manual, HTML
verbatim, from the Debian package {package} {version} (source package gimp-help,
https://download.gimp.org/pub/gimp/help/). Rebuild with
`python -m bench.build_docs_eval --language {code}`.

Copyright: 2002-2010 The GIMP Documentation Team (see the AUTHORS file of gimp-help-common)
License: GFDL-NIV-1.2+
 Permission is granted to copy, distribute and/or modify this document
 under the terms of the GNU Free Documentation License (GFDL), version
 1.2 or any later version published by the Free Software Foundation with
 no Invariant Sections, no Front-Cover Texts, and no Back-Cover Texts.
 .
 On Debian systems, the complete text of the GNU Free Documentation
 License version 1.2 can be found in /usr/share/common-licenses/GFDL-1.2.
"""
MIN_PROSE_WORDS = 150
MIN_PARAGRAPHS = 3
MAX_ENGLISH_SHARE = 0.1
EN_FUNCTION = frozenset(["the", "and", "of", "to", "is", "in", "that", "for", "with", "this", "are", "you", "can", "be"])
_VOID = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"])
_NAV = ("navheader", "navfooter")


@dataclass(frozen=True)
class Language:
    code: str  # ISO 639-1, as in the configuration's filters.language
    name: str  # in English, for the licence note
    package: str  # the Debian package of the GIMP manual in this language
    function_words: frozenset[str]  # frequent words no English page has, for english_share

    @property
    def help_dir(self) -> str:
        return f"usr/share/gimp/2.0/help/{self.code}"


LANGUAGES: dict[str, Language] = {
    "es": Language("es", "Spanish", "gimp-help-es", frozenset(
        ["de", "la", "el", "que", "y", "en", "los", "las", "se", "un", "una", "para", "con", "por", "del", "al", "es"])),
    "fr": Language("fr", "French", "gimp-help-fr", frozenset(
        ["de", "la", "le", "les", "des", "et", "un", "une", "du", "que", "qui", "pour", "dans", "est", "sur", "par",
         "au", "aux", "avec", "l", "d", "qu"])),
}


@dataclass
class Prose:
    paragraphs: list[str] = field(default_factory=list)
    headings: int = 0

    @property
    def words(self) -> list[str]:
        return [w for p in self.paragraphs for w in p.split()]


class _ProseParser(HTMLParser):
    """Collects <p> text outside the navigation blocks, and counts headings."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.prose = Prose()
        self._stack: list[tuple[str, bool]] = []  # (tag, opened a nav block)
        self._nav = 0
        self._p: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        nav = any(c in _NAV for c in classes)
        self._nav += nav
        self._stack.append((tag, nav))
        if tag == "p" and not self._nav:
            self._p = []
        if re.fullmatch(r"h[1-6]", tag) and not self._nav:
            self.prose.headings += 1

    def handle_endtag(self, tag: str) -> None:
        while self._stack:  # tolerate unclosed children
            open_tag, nav = self._stack.pop()
            self._nav -= nav
            if open_tag == "p" and self._p is not None:
                self.prose.paragraphs.append(" ".join("".join(self._p).split()))
                self._p = None
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._p is not None:
            self._p.append(data)


def prose(html: str) -> Prose:
    parser = _ProseParser()
    parser.feed(html)
    parser.close()
    return parser.prose


def english_share(words: list[str], own: frozenset[str]) -> float:
    """English function words among the function words counted, English's and `own`'s.
    An elided word counts as its first part: "l'image" as "l", "qu'il" as "qu"."""
    lower = [w.lower().strip(".,;:()«»“”\"'") for w in words]
    lower = [re.split("['’]", w, maxsplit=1)[0] for w in lower]
    mine = sum(w in own for w in lower)
    en = sum(w in EN_FUNCTION for w in lower)
    return en / max(mine + en, 1)


def eligible(html: str, language: Language) -> tuple[bool, str]:
    p = prose(html)
    words = p.words
    if p.headings == 0:
        return False, "no heading"
    if len([x for x in p.paragraphs if x]) < MIN_PARAGRAPHS:
        return False, "few paragraphs"
    if len(words) < MIN_PROSE_WORDS:
        return False, "short prose"
    if english_share(words, language.function_words) > MAX_ENGLISH_SHARE:
        return False, "English prose"
    return True, "ok"


def select(help_dir: Path, target: int, language: Language) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(source, html) of every k-th eligible page in sorted path order, and why others
    were not eligible (counts)."""
    pages = sorted(p for p in help_dir.rglob("*.html") if p.is_file() and not p.is_symlink())
    ok: list[tuple[str, str]] = []
    why: dict[str, int] = {}
    for path in pages:
        html = path.read_text(encoding="utf-8")
        keep, reason = eligible(html, language)
        why[reason] = why.get(reason, 0) + 1
        if keep:
            ok.append((str(path.relative_to(help_dir)), html))
    step = max(1, round(len(ok) / target))  # the stride nearest to `target` pages
    return ok[::step], why


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--language", choices=sorted(LANGUAGES), default="es")
    ap.add_argument("--deb", type=Path, help="a gimp-help-<language> .deb (default: apt-get download)")
    ap.add_argument("--out", type=Path, default=Path("tests/data/docs_eval"))
    ap.add_argument("--target", type=int, default=130)
    args = ap.parse_args()
    # Imported here: tests/support/docs_eval_junk.py reads pages with `prose` and needs only the stdlib.
    from pipelines.data.sample.debian import download_package, unpack_package

    lang = LANGUAGES[args.language]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        deb = args.deb.resolve() if args.deb else download_package(lang.package, work)
        version = unpack_package(deb, work / "root")
        chosen, why = select(work / "root" / lang.help_dir, args.target, lang)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{lang.package}.jsonl.gz"
    # mtime=0: the same pages give the same bytes, so a rebuild shows no spurious diff.
    with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz:
        for source, html in chosen:
            gz.write((json.dumps({"source": source, "html": html}, ensure_ascii=False) + "\n").encode())
    note = COPYRIGHT.format(package=lang.package, name=lang.name, version=version, code=lang.code)
    (args.out / f"{lang.package}.COPYRIGHT").write_text(note, encoding="utf-8")
    print(f"{lang.package} {version}: pages by eligibility {why}")
    print(f"wrote {len(chosen)} pages to {target} ({target.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
