"""The held-out documentation test set: good Spanish manual pages and ten kinds of junk,
run through the real read -> clean -> filter stages with the default settings.

    python -m tests.docs_eval          # prints the per-kind table and every dropped good page

Good pages: `tests/data/docs_eval/gimp-help-es.jsonl.gz`, Spanish GIMP manual pages chosen
by structure only (see bench/build_docs_eval.py, which rebuilds it). Junk: generated here,
deterministically, JUNK_PER_KIND documents of each kind in JUNK_KINDS, at the sizes a
crawler meets them. Neither side was chosen by what the filters do.
"""

from __future__ import annotations

import gzip
import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "docs_eval"
GOOD_FILE = DATA / "gimp-help-es.jsonl.gz"
GOOD = "good"  # the kind (and shard) of the good pages
JUNK_PER_KIND = 20
STAGES = ("read", "clean", "filter")

__all__ = ["GOOD", "JUNK_KINDS", "Outcome", "evaluate", "good_pages", "junk_documents", "report"]

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


@cache
def good_pages() -> tuple[tuple[str, str], ...]:
    """(source path in the GIMP manual, html) of every held-out good page."""
    with gzip.open(GOOD_FILE, "rt", encoding="utf-8") as f:
        return tuple((r["source"], r["html"]) for r in map(json.loads, f))


def write_corpus(root: Path, per_kind: int = JUNK_PER_KIND, seed: int = 17) -> dict[str, str]:
    """Two shards under `root`: good/ (the pages as .html) and junk/<kind>/... ;
    returns {source relative to its shard: kind}."""
    kinds: dict[str, str] = {}
    for name, html in good_pages():
        (root / GOOD).mkdir(parents=True, exist_ok=True)
        (root / GOOD / name).write_text(html, encoding="utf-8")
        kinds[name] = GOOD
    for kind, name, text in junk_documents(random.Random(seed), per_kind):
        path = root / "junk" / kind / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        kinds[f"{kind}/{name}"] = kind
    return kinds


@dataclass(frozen=True)
class Outcome:
    source: str  # relative to its shard
    kind: str  # GOOD or a junk kind
    kept: bool
    reason: str | None  # "<stage>/<reason>" when dropped
    detail: str = ""


def evaluate(workdir: Path | None = None) -> list[Outcome]:
    """Every document's fate through stages.ingest.read/clean/filter_stage with the default
    configuration (preset "tiny": the data stages do not depend on the model preset)."""
    from pipelines.data.corpus import list_shards, open_corpus
    from stages.config import preset
    from stages.ingest import clean_stage, filter_stage, read_stage
    from stages.store import DataStore, read_table

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        kinds = write_corpus(Path(tmp) / "corpus")
        store, cfg = DataStore(Path(tmp) / "home"), preset("tiny")
        fs, root = open_corpus(str(Path(tmp) / "corpus"))
        fate: dict[str, tuple[str | None, str]] = {}
        for shard in list_shards(fs, root):
            read_stage(store, fs, root, shard, cfg)
            clean_stage(store, shard.key, cfg)
            filter_stage(store, shard.key, cfg)
            for src in read_table(store.part("filtered_documents", shard.key))["source"].to_pylist():
                fate[_rel(src, shard.key)] = (None, "")
            for stage in STAGES:
                path = store.rejected(shard.key, stage)
                if not path.exists():
                    continue
                for r in read_table(path, ["source", "reason", "detail"]).to_pylist():
                    fate[_rel(r["source"], shard.key)] = (f"{stage}/{r['reason']}", r["detail"] or "")
    missing = sorted(set(kinds) - set(fate))
    assert not missing, f"documents neither kept nor rejected: {missing[:5]}"
    return [Outcome(s, k, fate[s][0] is None, fate[s][0], fate[s][1]) for s, k in sorted(kinds.items())]


def _rel(source: str, shard: str) -> str:
    return source.removeprefix(f"{shard}/")


def keep_rates(outcomes: list[Outcome]) -> dict[str, tuple[int, int]]:
    """{kind: (kept, total)}, good pages first, then the junk kinds in JUNK_KINDS order."""
    total = Counter(o.kind for o in outcomes)
    kept = Counter(o.kind for o in outcomes if o.kept)
    return {k: (kept[k], total[k]) for k in (GOOD, *JUNK_KINDS) if total[k]}


def report(outcomes: list[Outcome]) -> str:
    """The per-kind table, the drop reasons of the good pages, every dropped good page with
    its reason, and every junk document that was kept."""
    lines = [f"{'kind':<16}{'kept':>6}{'total':>7}{'dropped %':>11}  top drop reasons"]
    for kind, (kept, n) in keep_rates(outcomes).items():
        reasons = Counter(o.reason for o in outcomes if o.kind == kind and not o.kept)
        top = ", ".join(f"{r} {c}" for r, c in reasons.most_common(3))
        lines.append(f"{kind:<16}{kept:>6}{n:>7}{100 * (n - kept) / n:>10.1f}%  {top}")
    junk = [o for o in outcomes if o.kind != GOOD]
    lines.append(f"{'junk (all)':<16}{sum(o.kept for o in junk):>6}{len(junk):>7}"
                 f"{100 * sum(not o.kept for o in junk) / max(len(junk), 1):>10.1f}%")
    dropped = [o for o in outcomes if o.kind == GOOD and not o.kept]
    if dropped:
        lines.append(f"\ngood pages dropped ({len(dropped)}), by reason:")
        lines += [f"  {c:>4}  {r}" for r, c in Counter(o.reason for o in dropped).most_common()]
        lines += [f"  {o.source}: {o.reason}{_extra(o)}" for o in dropped]
    leaked = [o for o in junk if o.kept]
    if leaked:
        lines.append(f"\njunk kept ({len(leaked)}):")
        lines += [f"  {o.kind}: {o.source}" for o in leaked]
    return "\n".join(lines)


def _extra(o: Outcome) -> str:
    """The detail when it says more than the reason (language ID scores do)."""
    said = o.detail.split(": ", 1)[-1]
    return "" if not said or (o.reason or "").endswith(said) else f" ({said})"


def main(run: Callable[[], list[Outcome]] = evaluate) -> None:
    print(report(run()))


if __name__ == "__main__":
    main()
