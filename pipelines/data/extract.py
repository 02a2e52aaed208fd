"""HTML -> plain text with boilerplate removal, and Unicode normalisation of any text.

Two extractors, because they fail differently: "resiliparse" (the default: a fast C++ DOM
walk with main-content heuristics) and "trafilatura" (heavier, tuned for news and blog
pages, about 10x slower, and on documentation it drops headings and "menu" / "bar"
elements). What each loses: docs/data.md#extraction; `bench/compare_extractors.py`
measures them. Both functions here are total: odd input never raises, it yields "".
"""

from __future__ import annotations

import logging
import re
import unicodedata
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

EXTRACTORS = ("resiliparse", "trafilatura")

# lxml refuses a `str` that still carries an XML encoding declaration ("Unicode strings with
# encoding declaration are not supported"); the input is already decoded, so the declaration
# (and a stray BOM) is meaningless and removed before parsing.
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)

# XHTML (DocBook output such as debian-reference) writes empty elements as `<a id="x"/>`.
# An HTML5 parser ignores the "/" and leaves the <a> open until the end of its parent, so
# whole sections end up inside a link and main-content heuristics drop them as navigation
# (measured: resiliparse kept 64k of 99k characters of debian-reference ch01). Such
# elements are closed explicitly; void elements (<br/>, <img/>) are left alone.
_VOID = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param")
    + ("source", "track", "wbr")
)
_SELF_CLOSING = re.compile(r"<([A-Za-z][\w:-]*)(\s[^<>]*?)?\s*/>")


def _close_empty(m: re.Match[str]) -> str:
    tag = m.group(1)
    if tag.lower() in _VOID:
        return m.group(0)
    return f"<{tag}{m.group(2) or ''}></{tag}>"


# Pages above this size are truncated before parsing: a multi-MB "HTML" file is almost
# always a data dump or generated listing, and this bounds the time and memory one page takes.
_MAX_HTML_CHARS = 5_000_000


def _prepare(html: Any) -> str:
    if isinstance(html, bytes):
        html = decode_html(html)
    if not isinstance(html, str):
        return ""
    html = html.lstrip("\ufeff")
    html = _XML_DECL.sub("", html, count=1)
    # Unpaired surrogates (from surrogateescape decoding) crash lxml and lexbor's UTF-8 encoder.
    html = _SURROGATES.sub("\ufffd", html)[:_MAX_HTML_CHARS]
    if "/>" in html:
        html = _SELF_CLOSING.sub(_close_empty, html)
    return html


def decode_html(raw: bytes) -> str:
    """Bytes -> str: valid UTF-8 wins (meta tags often lie after a re-encode), then the
    BOM / <meta charset>, then uchardet's guess; undecodable bytes become U+FFFD.

    Readers that already hold a str do not need this; it is for callers holding bytes.
    """
    try:
        return raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError:
        pass
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    try:
        return bytes_to_str(raw, detect_encoding(raw, from_html_meta=True), errors="replace")
    except Exception:  # noqa: BLE001 - unknown codec names in odd meta tags
        return raw.decode("cp1252", "replace")


# resiliparse 2.0.1's main-content mode drops a text node that is one 3-byte UTF-8 character,
# e.g. the closing quote in `<a>Sección 6.5, “<code>apt</code>”</a>` or a CJK full stop after
# `<code>` (measured: ~8% of the closing quotes of the es-ES handbook). Such a node is padded
# with a WORD JOINER, which is removed from the output again. Lone entities (&rdquo;) too.
_LONE_CHAR = re.compile(r">(\s*)([\u0800-\uffff]|&#?[0-9A-Za-z]{2,8};)(\s*)<")
_PAD = "\u2060"


def _resiliparse(html: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    html = _LONE_CHAR.sub(lambda m: f">{m[1]}{m[2]}{_PAD}{m[3]}<", html)
    text = extract_plain_text(
        html,
        # Block structure as newlines: the line-based filters (C4, FineWeb, Gopher) and
        # paragraph dedup need one paragraph / list item / heading per line.
        preserve_formatting=True,
        # Boilerplate removal: <nav>, <header>, <footer>, <aside>, menu/cookie/footer
        # classes, hidden elements. Note: `hidden="true"` content is dropped too; the
        # LibreOffice help hides module-specific sections that way (4.5% of its text, 12
        # pages end up empty) and that cannot be switched off separately.
        main_content=True,
        # "• item" bullets are kept: Gopher's max_bullet_lines_ratio rule uses them to spot
        # pages that are nothing but link lists.
        list_bullets=True,
        # Alt texts in documentation are icon labels ("tip", "Anterior", "Product Site"),
        # repeated on every page and not prose.
        alt_texts=False,
        links=False,  # URLs are not language; they only feed the tokenizer noise
        form_fields=False,
        # <noscript> holds "enable JavaScript" notices and redirects, never content.
        noscript=False,
        # User comment threads and "posted by / on" lines are not the document.
        comments=False,
        post_meta=False,
        # Tables of contents (DocBook, MediaWiki, most doc generators use these names) only
        # repeat headings found in the body or on other pages: navigation, not prose.
        skip_elements=[".toc", "#toc"],
    )
    return text.replace(_PAD, "")


@lru_cache(maxsize=1)
def _trafilatura_config() -> Any:
    from trafilatura.settings import use_config

    config = use_config()
    # The timeout uses SIGALRM, which only works in the main thread and makes results depend
    # on machine load; extraction time is bounded by _MAX_HTML_CHARS instead.
    config.set("DEFAULT", "EXTRACTION_TIMEOUT", "0")
    # Keep the library default (250): below it trafilatura tries its fallback extractors,
    # which is where most of its recall on short pages comes from.
    config.set("DEFAULT", "MIN_EXTRACTED_SIZE", "250")
    config.set("DEFAULT", "MIN_OUTPUT_SIZE", "1")
    return config


def _trafilatura(html: str) -> str:
    import trafilatura

    text = trafilatura.extract(
        html,
        config=_trafilatura_config(),
        output_format="txt",
        # Favour recall: the quality filters and dedup downstream remove what is left of the
        # boilerplate, but text dropped here is lost for good. Measured on the sample against
        # the default: +13% characters on the es-ES handbook, +4% on the LibreOffice help,
        # fewer repeated lines (4.8% vs 6.3%), and faster. favor_precision lost 10% of the
        # LibreOffice text and left 9 of 600 pages empty.
        favor_recall=True,
        fast=False,  # keep the readability/jusText fallback comparison (deterministic)
        include_comments=False,
        include_tables=True,  # package and option tables are real content in docs
        include_images=False,
        include_links=False,
        include_formatting=False,
        # Its dedup is a process-global LRU cache: output would depend on document order
        # and on which worker saw which page. Dedup is a stage of its own here.
        deduplicate=False,
        with_metadata=False,
        url=None,  # no URL-based heuristics, nothing fetched
        target_language=None,  # language ID is a separate stage with its own thresholds
    )
    return text or ""


def html_to_text(html: str, extractor: str = "resiliparse") -> str:
    """Main-content plain text of an HTML page; "" when there is none or the input is garbage."""
    if extractor not in EXTRACTORS:
        raise ValueError(f"unknown extractor {extractor!r}; choose one of {EXTRACTORS}")
    html = _prepare(html)
    if not html.strip():
        return ""
    try:
        text = _resiliparse(html) if extractor == "resiliparse" else _trafilatura(html)
    except ImportError:
        raise  # a broken install must fail loudly, not turn every page into ""
    except Exception as e:  # noqa: BLE001 - a bad page must not stop a shard
        logging.getLogger(__name__).warning("%s extraction failed (%s: %s); page treated as empty",
                                            extractor, type(e).__name__, e)
        return ""
    return text.strip()


# --- normalisation ---------------------------------------------------------------

# C0/C1 control characters except \t and \n (\r and \f are turned into \n first).
_CONTROL = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (9, 10)}
_CONTROL[0xFEFF] = None  # BOM / zero-width no-break space inside text: an artefact of concatenation
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_NEWLINES = re.compile(r"\r\n?|[\f\v\u2028\u2029\x85]")
_TRAILING_WS = re.compile(r"[ \t\u00a0\u3000]+$", re.MULTILINE)
_BLANK_RUNS = re.compile(r"\n{4,}")  # 4 newlines = 3 blank lines
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[@-Z\\-_]")


@lru_cache(maxsize=1)
def _ftfy_config() -> Any:
    import ftfy

    return ftfy.TextFixerConfig(
        # Mojibake ("EspaÃ±a" -> "España") is what we want ftfy for.
        fix_encoding=True,
        # Plain text may legitimately talk about "&lt;" (docs about HTML); extraction already
        # decoded real entities.
        unescape_html=False,
        remove_terminal_escapes=True,
        fix_latin_ligatures=True,  # "ﬁ" -> "fi": same word, one tokenization
        # Fullwidth forms are normal in the zh/ja handbook; curly quotes are real text.
        fix_character_width=False,
        uncurl_quotes=False,
        fix_line_breaks=True,
        fix_surrogates=True,
        remove_control_chars=True,
        normalization=None,  # done below with the configured form
        explain=False,
    )


def normalize_text(text: str, form: str = "NFC", fix_mojibake: bool = True) -> str:
    """Repair mojibake, apply Unicode normalisation `form`, drop control characters,
    strip trailing spaces and keep at most 2 consecutive blank lines."""
    if not isinstance(text, str) or not text:
        return ""
    text = _SURROGATES.sub("\ufffd", text)
    if fix_mojibake:
        import ftfy

        try:
            text = ftfy.fix_text(text, _ftfy_config())
        except Exception as e:  # noqa: BLE001 - ftfy is best-effort; keep the text as it was
            log.debug("ftfy failed, text kept as is: %s", e)
    if form:
        text = unicodedata.normalize(form, text)  # type: ignore[arg-type]
    text = _NEWLINES.sub("\n", text)
    text = _ANSI.sub("", text)
    text = text.translate(_CONTROL)
    text = _TRAILING_WS.sub("", text)
    text = _BLANK_RUNS.sub("\n\n\n", text)
    return text.strip("\n").rstrip()


# trafilatura logs an ERROR for every empty or unparsable page; the caller counts empties.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
