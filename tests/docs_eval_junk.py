"""The junk half of the held-out documentation set: ten kinds, each a function
(rng, i) -> (file name, content), generated deterministically at the sizes a crawler meets
them, never chosen by what the filters do.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.docs_eval_pages import good_pages

JUNK_PER_KIND = 20

# --- junk: ten kinds, each function (rng, i) -> (file name, content) --------------------

SENTENCES = (
    "Envío gratis en pedidos superiores a 50 euros.", "Nuestro equipo le atenderá de lunes a viernes.",
    "La reunión de vecinos será el jueves en el salón de actos.", "Consulte las condiciones de la garantía.",
    "Haga clic en el botón para confirmar su suscripción.", "Los resultados se publicarán el lunes.",
    "Si tiene alguna pregunta, escríbanos desde el formulario.", "El precio incluye desayuno y piscina.",
    "Recuerde que la contraseña debe tener ocho caracteres.", "La exposición podrá visitarse hasta septiembre.",
)
MENU = ("Inicio", "Quiénes somos", "Productos", "Servicios", "Ofertas", "Blog", "Noticias", "Contacto",
        "Aviso legal", "Política de privacidad", "Política de cookies", "Mapa del sitio", "Mi cuenta",
        "Carrito", "Preguntas frecuentes", "Trabaja con nosotros", "Envíos y devoluciones", "Tiendas",
        "Novedades", "Marcas", "Iniciar sesión", "Registrarse", "Ver más", "Categorías", "Español", "English")
CATEGORIES = ("Hogar", "Jardín", "Electrónica", "Informática", "Moda mujer", "Moda hombre", "Niños",
              "Deportes", "Libros", "Música", "Juguetes", "Salud y belleza", "Alimentación", "Mascotas",
              "Motor", "Bricolaje", "Oficina", "Viajes", "Regalos", "Outlet")
SPAM_TOPICS = ("zapatos", "préstamos rápidos", "seguros de coche", "hoteles en Madrid", "muebles de jardín",
               "abogados de divorcio", "pisos en alquiler", "dentista", "cerrajero urgente", "casino online")
SPAM_MODS = ("baratos", "online", "oferta", "2024", "mejor precio", "comprar", "envío gratis", "outlet",
             "descuento", "Madrid", "Barcelona", "Valencia", "Sevilla", "España", "opiniones", "cerca de mí",
             "24 horas", "económicos", "de calidad", "al mejor precio")
SYLLABLES = ("ma", "te", "lo", "cra", "bien", "tor", "es", "qui", "de", "la", "pro", "se", "vo", "ción",
             "tra", "mi", "en", "do", "ra", "ble", "cu", "ño", "gue", "sa", "rí", "al", "ber", "tí", "pe", "os")
LOREM = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse", "cillum", "fugiat", "nulla", "pariatur", "excepteur", "sint", "occaecat", "cupidatat", "non", "proident", "sunt", "culpa", "qui", "officia", "deserunt", "mollit", "anim", "id", "est", "laborum"]
HTML = ('<!DOCTYPE html><html lang="es"><head><meta charset="utf-8"><title>{title}</title></head>'
        "<body>\n{body}\n</body></html>")


def _html(title: str, body: str) -> str:
    return HTML.format(title=title, body=body)


def _links(items: list[str], cls: str = "menu") -> str:
    return f'<ul class="{cls}">' + "".join(f'<li><a href="/{i.lower()}">{i}</a></li>' for i in items) + "</ul>"


def keyword_spam(rng: random.Random, i: int) -> tuple[str, str]:
    # SEO doorway page: the same topic in every combination, a token sentence, a tag cloud.
    topic = SPAM_TOPICS[i % len(SPAM_TOPICS)]
    phrases = [f"{topic} {rng.choice(SPAM_MODS)}" for _ in range(rng.randint(60, 250))]
    paras = [", ".join(phrases[j:j + 15]) + "." for j in range(0, len(phrases), 15)]
    body = (f"<h1>{topic.capitalize()} {rng.choice(SPAM_MODS)}</h1><p>Compre {topic} al mejor precio. "
            f"{rng.choice(SENTENCES)}</p>" + "".join(f"<p>{p}</p>" for p in paras)
            + f'<div class="tags">{" | ".join(rng.sample(phrases, min(30, len(phrases))))}</div>')
    return f"spam-{i:02d}.html", _html(f"{topic} {rng.choice(SPAM_MODS)}", body)


def menu_only(rng: random.Random, i: int) -> tuple[str, str]:
    # A landing or category page: header menu, sidebar, a grid of links, footer; no prose.
    top = _links(rng.sample(MENU, rng.randint(6, 12)))
    side = _links(rng.sample(CATEGORIES, rng.randint(8, 20)), "sidebar")
    grid = "".join(f'<div class="item"><a href="/p/{j}">{rng.choice(CATEGORIES)} {j}</a> <span>Ver más</span></div>'
                   for j in range(rng.randint(6, 30)))
    foot = _links(rng.sample(MENU, 8), "footer-links") + "<p>© 2024 Tienda Online S.L.</p>"
    if i % 2:  # older sites: layout tables and generic divs instead of <nav>/<footer>
        body = f'<table><tr><td>{top}</td></tr><tr><td>{side}</td><td>{grid}</td></tr></table><div>{foot}</div>'
    else:
        body = f"<header><nav>{top}</nav></header><aside>{side}</aside><main>{grid}</main><footer>{foot}</footer>"
    return f"menu-{i:02d}.html", _html(rng.choice(CATEGORIES), body)


def gibberish(rng: random.Random, i: int) -> tuple[str, str]:
    # Spanish-looking pseudo-words from Spanish syllables (spun or corrupted text), or hash soup.
    if i % 4 == 3:
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(4, 16))) for _ in range(rng.randint(150, 500))]
        return f"gibberish-{i:02d}.txt", "\n".join(" ".join(words[j:j + 12]) for j in range(0, len(words), 12))
    sents = []
    for _ in range(rng.randint(15, 50)):
        words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(6, 16))]
        sents.append(" ".join(words).capitalize() + rng.choice(".,.;?"))
    return f"gibberish-{i:02d}.txt", "\n\n".join(" ".join(sents[j:j + 5]) for j in range(0, len(sents), 5))


def log_dump(rng: random.Random, i: int) -> tuple[str, str]:
    lines = []
    for n in range(rng.randint(40, 300)):
        t = f"2024-03-{1 + i % 28:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        ip = f"192.168.{rng.randint(0, 9)}.{rng.randint(1, 254)}"
        lines.append([
            (f"{t},{rng.randint(100, 999)} {rng.choice(['INFO', 'WARN', 'ERROR'])} [hilo-{rng.randint(1, 8)}] "
            f"{rng.choice(['Conexión establecida con', 'No se pudo conectar con', 'Tiempo de espera agotado en'])} "
            f"{ip}:{rng.choice([5432, 3306, 8080])}"),
            (f'{ip} - - [{t}] "GET /{rng.choice(CATEGORIES).lower()}/{n} HTTP/1.1" {rng.choice([200, 304, 404, 500])} '
            f'{rng.randint(200, 90000)} "-" "Mozilla/5.0"'),
            (f"{t} servidor sshd[{rng.randint(1000, 9999)}]: Failed password for invalid user "
            f"{rng.choice(['admin', 'root', 'test', 'oracle'])} from {ip} port {rng.randint(30000, 65000)} ssh2"),
        ][i % 3])
    return f"log-{i:02d}.txt", "\n".join(lines)


def lorem_ipsum(rng: random.Random, i: int) -> tuple[str, str]:
    # A site template nobody filled in: Spanish headings, Latin filler.
    paras = [" ".join(rng.choice(LOREM) for _ in range(rng.randint(30, 90))).capitalize() + "." for _ in range(rng.randint(3, 8))]
    if i % 5:
        paras[0] = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " + paras[0]
    heads = rng.sample(("Sobre nosotros", "Nuestros servicios", "Misión", "Contacto", "Equipo", "Proyectos"), 3)
    body = "".join(f"<h2>{heads[j % 3]}</h2><p>{p}</p>" for j, p in enumerate(paras))
    return f"lorem-{i:02d}.html", _html(heads[0], body)


def code(rng: random.Random, i: int) -> tuple[str, str]:
    # Source files with Spanish comments and identifiers, as raw files or in a <pre> block.
    out = []
    for f in range(rng.randint(4, 15)):
        name, var = f"calcular_{rng.choice(['total', 'precio', 'media', 'saldo'])}_{f}", rng.choice(["datos", "lista", "fila"])
        out.append([
            (f"def {name}({var}, descuento=0.{rng.randint(1, 9)}):\n    # Suma los importes y aplica el descuento\n"
            f"    total = sum(x['importe'] for x in {var} if x.get('activo'))\n    if total > {rng.randint(10, 999)}:\n"
            f"        total *= 1 - descuento\n    return round(total, 2)\n"),
            (f"function {name}({var}) {{\n  // Recorre la lista y devuelve el total\n  let total = 0;\n"
            f"  for (const x of {var}) {{ if (x.activo) {{ total += x.importe; }} }}\n  return total.toFixed(2);\n}}\n"),
            (f"SELECT cliente_id, SUM(importe) AS total\nFROM pedidos\nWHERE fecha >= '2024-0{rng.randint(1, 9)}-01'\n"
            f"GROUP BY cliente_id\nHAVING SUM(importe) > {rng.randint(10, 999)}\nORDER BY total DESC;\n"),
        ][(i + f) % 3])
    text = "\n".join(out)
    if i % 2:
        return f"code-{i:02d}.html", _html(f"ejemplo{i}.py", f"<pre><code>{text}</code></pre>")
    return f"code-{i:02d}.txt", text


def repeated_lines(rng: random.Random, i: int) -> tuple[str, str]:
    # A template loop gone wrong: one to three lines repeated dozens of times.
    block = rng.sample(SENTENCES, rng.randint(1, 3))
    return f"repeated-{i:02d}.txt", "\n".join(block * rng.randint(15, 80))


def very_short(rng: random.Random, i: int) -> tuple[str, str]:
    text = rng.choice((
        "Página no encontrada", "Error 404. La página que busca no existe.", "Cargando...",
        "Acceso denegado. Inicie sesión para continuar.", "Sitio en construcción. Vuelva pronto.",
        "Gracias por su compra.", rng.choice(SENTENCES), " ".join(rng.sample(SENTENCES, 2)),
    ))
    return (f"short-{i:02d}.html", _html(text[:20], f"<p>{text}</p>")) if i % 2 else (f"short-{i:02d}.txt", text)


def number_table(rng: random.Random, i: int) -> tuple[str, str]:
    header = rng.choice((["Fecha", "Apertura", "Cierre", "Máximo", "Mínimo", "Volumen"],
                         ["Estación", "Temp. (ºC)", "Humedad (%)", "Presión (hPa)", "Lluvia (mm)"],
                         ["Sorteo", "N1", "N2", "N3", "N4", "N5", "N6", "Reintegro"]))
    rows = [[f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/2024"] + [f"{rng.uniform(0, 1000):.2f}".replace(".", ",")
            for _ in header[1:]] for _ in range(rng.randint(20, 200))]
    if i % 2:
        cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
        head = "".join(f"<th>{h}</th>" for h in header)
        return f"table-{i:02d}.html", _html("Datos", f"<table><tr>{head}</tr>{cells}</table>")
    return f"table-{i:02d}.txt", "\n".join(";".join(r) for r in [header, *rows])


# Spanish UTF-8 read with the wrong charset, or lossily re-saved: damage that cleaning
# (ftfy) cannot undo. The pages are held-out good pages: only the encoding is wrong.
MOJIBAKE = ("cp1251", "gbk", "shift_jis", "koi8_r", "replace", "utf-16-swapped")


def mojibake(rng: random.Random, i: int) -> tuple[str, str]:
    pages = good_pages()
    name, html = pages[(i * 7) % len(pages)]
    how = MOJIBAKE[i % len(MOJIBAKE)]
    raw = html.encode("utf-8")
    if how == "replace":  # Latin-1 file read as UTF-8, then saved: every accent is lost
        text = html.encode("latin-1", "replace").decode("utf-8", "replace")
    elif how == "utf-16-swapped":  # UTF-16 with the wrong byte order
        text = html.encode("utf-16-be").decode("utf-16-le", "replace")
    else:
        text = raw.decode(how, "replace")
    return f"mojibake-{i:02d}-{how}-{name}", text


JUNK: dict[str, Callable[[random.Random, int], tuple[str, str]]] = {
    "keyword_spam": keyword_spam, "menu_only": menu_only, "gibberish": gibberish, "log_dump": log_dump,
    "lorem_ipsum": lorem_ipsum, "code": code, "repeated_lines": repeated_lines, "very_short": very_short,
    "number_table": number_table, "mojibake": mojibake,
}
JUNK_KINDS = tuple(JUNK)


def junk_documents(rng: random.Random, per_kind: int = JUNK_PER_KIND) -> list[tuple[str, str, str]]:
    """(kind, file name, content) for `per_kind` documents of every kind, deterministic in rng."""
    return [(kind, *make(rng, i)) for kind, make in JUNK.items() for i in range(per_kind)]
