"""HTML extraction and text normalisation: boilerplate out, content in, never a crash."""

from __future__ import annotations

import unicodedata

import pytest

from pipelines.data.extract import EXTRACTORS, decode_html, html_to_text, normalize_text

MAIN = (
    "La tortilla de patatas es uno de los platos más conocidos de la cocina española. Se "
    "prepara con huevos, patatas y, según la casa, cebolla; el secreto está en freír las "
    "patatas a fuego lento antes de cuajarla en la sartén."
)
SECOND = (
    "Muchos cocineros discuten desde hace décadas si la cebolla debe formar parte de la "
    "receta tradicional, y cada región defiende su propia versión con orgullo."
)
PAGE = f"""<!DOCTYPE html><html lang="es"><head><meta charset="utf-8"><title>Receta</title>
<script>var tracking = "no es texto";</script><style>body {{ color: red }}</style></head><body>
<header><nav class="menu"><ul><li><a href="/">Inicio</a></li><li><a href="/recetas">Recetas
</a></li><li><a href="/contacto">Contacto</a></li></ul></nav></header>
<div id="cookie-banner" class="cookie-consent"><p>Utilizamos cookies para mejorar su
experiencia. Al continuar navegando acepta nuestra política de cookies.</p>
<button>Aceptar</button></div>
<main><article><h1>La tortilla de patatas</h1><p>{MAIN}</p><p>{SECOND}</p></article></main>
<footer class="site-footer"><p>© 2024 Cocina Fácil. Todos los derechos reservados.
Aviso legal · Privacidad</p></footer></body></html>"""


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_boilerplate_removed_main_text_kept(extractor: str) -> None:
    text = html_to_text(PAGE, extractor)
    assert MAIN in text and SECOND in text
    for boilerplate in ("Contacto", "cookies", "derechos reservados", "tracking", "color"):
        assert boilerplate not in text, (extractor, boilerplate)


@pytest.mark.parametrize("extractor", EXTRACTORS)
@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "   ",
        "<",
        "<<<>>>&&&;",
        "\x00\x01\x02<p>\ud800</p>",
        "<html><body>" + "<div>" * 5000 + "x",
        "<?xml version='1.0' encoding='latin-1'?><p>sin cerrar",
        "<table><tr><td>" * 300,
        "no html at all, just a sentence",
        b"<p>bytes en vez de str \xe9</p>",
        None,
    ],
)
def test_garbage_never_raises(extractor: str, garbage: object) -> None:
    out = html_to_text(garbage, extractor)  # type: ignore[arg-type]
    assert isinstance(out, str)


def test_unknown_extractor_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="unknown extractor"):
        html_to_text(PAGE, "beautifulsoup")


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_xml_declaration_and_xhtml_self_closing_anchors(extractor: str) -> None:
    # DocBook XHTML: an encoding declaration in a str, and `<a id=".."/>` before each
    # section. Parsed as HTML5, the anchor stays open and swallows the section.
    sections = "".join(
        f'<div class="section"><a id="s{i}"/><h2>Sección {i}</h2><p>{MAIN} ({i})</p></div>'
        for i in range(5)
    )
    page = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
        f"<head><title>t</title></head><body><div class='chapter'>{sections}</div></body></html>"
    )
    text = html_to_text(page, extractor)
    for i in range(5):
        assert f"{MAIN} ({i})" in text


def test_resiliparse_keeps_lone_closing_quote_after_inline_element() -> None:
    page = (
        "<html><body><div><p>Véase la <a href='x'>Sección 6.5, “Interfaces: "
        "<code>aptitude</code>”</a>), y también 中文<code>apt</code>。</p>"
        "<p>Con entidad: «<b>sudo</b>&raquo; y <i>“apt</i>&rdquo;</p>"
        f"<p>{MAIN}</p></div></body></html>"
    )
    text = html_to_text(page, "resiliparse")
    assert "“Interfaces: aptitude”)" in text
    assert "apt。" in text
    assert "«sudo» y “apt”" in text
    assert "\u2060" not in text  # the padding used for the workaround is removed


def test_table_of_contents_is_skipped() -> None:
    page = (
        "<html><body><div class='toc'><dl><dt><a href='#a'>1.1. Primera sección del índice"
        f"</a></dt></dl></div><p>{MAIN}</p></body></html>"
    )
    text = html_to_text(page, "resiliparse")
    assert MAIN in text and "Primera sección" not in text


def test_decode_html_uses_meta_charset() -> None:
    raw = '<html><head><meta charset="iso-8859-1"></head><body>España</body></html>'
    assert "España" in decode_html(raw.encode("latin-1"))
    assert "España" in decode_html(raw.replace("iso-8859-1", "utf-8").encode("utf-8"))


def test_mojibake_repaired() -> None:
    assert normalize_text("EspaÃ±a y la cigÃ¼eÃ±a") == "España y la cigüeña"
    assert normalize_text("EspaÃ±a", fix_mojibake=False) == "EspaÃ±a"


def test_nfc_normalisation() -> None:
    decomposed = "Espan\u0303a, cafe\u0301"
    out = normalize_text(decomposed)
    assert out == "España, café"
    assert unicodedata.is_normalized("NFC", out)
    assert normalize_text("España", form="NFD") == unicodedata.normalize("NFD", "España")


def test_control_chars_whitespace_and_blank_lines() -> None:
    raw = "uno\x00 dos\x07\r\ntres   \t\n\n\n\n\n\ncuatro\x1b[1m negrita\x1b[0m\tfin\ufeff\n\n"
    assert normalize_text(raw) == "uno dos\ntres\n\n\ncuatro negrita\tfin"


def test_normalize_keeps_meaningful_characters() -> None:
    # Curly quotes, fullwidth CJK punctuation and ZWNJ (Persian) are real text, not noise.
    text = "«Hola» “dijo” ‘él’ — 你好，世界！ می‌خواهم"
    assert normalize_text(text) == text


@pytest.mark.parametrize("value", ["", "   \n\n  ", "\x00\x01", None])
def test_normalize_empty(value: object) -> None:
    assert normalize_text(value) == ""  # type: ignore[arg-type]
