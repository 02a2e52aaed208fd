"""The junk half of the held-out documentation set: eleven kinds, each a function
(rng, i, language) -> (file name, content), generated deterministically at the sizes a
crawler meets them, never chosen by what the filters do.

Every kind is written in the set's language: its words come from the dicts below, keyed by
language (a language of LANGUAGES adds its entry to each). Mojibake and word salad are made
from the language's good pages.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from bench.build_docs_eval import prose
from tests.support.docs_eval_pages import good_pages

JUNK_PER_KIND = 20

# --- the words of each language ----------------------------------------------------------

SENTENCES = {
    "es": ("Envío gratis en pedidos superiores a 50 euros.", "Nuestro equipo le atenderá de lunes a viernes.",
           "La reunión de vecinos será el jueves en el salón de actos.", "Consulte las condiciones de la garantía.",
           "Haga clic en el botón para confirmar su suscripción.", "Los resultados se publicarán el lunes.",
           "Si tiene alguna pregunta, escríbanos desde el formulario.", "El precio incluye desayuno y piscina.",
           "Recuerde que la contraseña debe tener ocho caracteres.", "La exposición podrá visitarse hasta septiembre."),
    "fr": ("Livraison gratuite dès 50 euros d'achat.", "Notre équipe vous répond du lundi au vendredi.",
           "La réunion des copropriétaires aura lieu jeudi dans la salle des fêtes.",
           "Consultez les conditions de la garantie.", "Cliquez sur le bouton pour confirmer votre abonnement.",
           "Les résultats seront publiés lundi.", "Si vous avez une question, écrivez-nous depuis le formulaire.",
           "Le prix comprend le petit-déjeuner et l'accès à la piscine.",
           "N'oubliez pas que le mot de passe doit comporter huit caractères.",
           "L'exposition est ouverte jusqu'en septembre."),
}
MENU = {
    "es": ("Inicio", "Quiénes somos", "Productos", "Servicios", "Ofertas", "Blog", "Noticias", "Contacto",
           "Aviso legal", "Política de privacidad", "Política de cookies", "Mapa del sitio", "Mi cuenta",
           "Carrito", "Preguntas frecuentes", "Trabaja con nosotros", "Envíos y devoluciones", "Tiendas",
           "Novedades", "Marcas", "Iniciar sesión", "Registrarse", "Ver más", "Categorías", "Español", "English"),
    "fr": ("Accueil", "Qui sommes-nous ?", "Produits", "Services", "Promotions", "Blog", "Actualités", "Contact",
           "Mentions légales", "Politique de confidentialité", "Gestion des cookies", "Plan du site",
           "Mon compte", "Panier", "Questions fréquentes", "Nous rejoindre", "Livraison et retours",
           "Nos magasins", "Nouveautés", "Marques", "Se connecter", "S'inscrire", "Voir plus", "Catégories",
           "Français", "English"),
}
CATEGORIES = {
    "es": ("Hogar", "Jardín", "Electrónica", "Informática", "Moda mujer", "Moda hombre", "Niños",
           "Deportes", "Libros", "Música", "Juguetes", "Salud y belleza", "Alimentación", "Mascotas",
           "Motor", "Bricolaje", "Oficina", "Viajes", "Regalos", "Outlet"),
    "fr": ("Maison", "Jardin", "Électroménager", "Informatique", "Mode femme", "Mode homme", "Enfants",
           "Sport", "Livres", "Musique", "Jouets", "Santé et beauté", "Épicerie", "Animalerie",
           "Auto et moto", "Bricolage", "Bureau", "Voyages", "Idées cadeaux", "Déstockage"),
}
SHOP = {"es": ("Ver más", "© 2024 Tienda Online S.L."), "fr": ("Voir plus", "© 2024 Boutique en ligne SARL")}
SPAM_TOPICS = {
    "es": ("zapatos", "préstamos rápidos", "seguros de coche", "hoteles en Madrid", "muebles de jardín",
           "abogados de divorcio", "pisos en alquiler", "dentista", "cerrajero urgente", "casino online"),
    "fr": ("chaussures", "crédit rapide", "assurance auto", "hôtel à Paris", "salon de jardin",
           "avocat divorce", "appartement à louer", "dentiste", "serrurier urgence", "casino en ligne"),
}
SPAM_MODS = {
    "es": ("baratos", "online", "oferta", "2024", "mejor precio", "comprar", "envío gratis", "outlet",
           "descuento", "Madrid", "Barcelona", "Valencia", "Sevilla", "España", "opiniones", "cerca de mí",
           "24 horas", "económicos", "de calidad", "al mejor precio"),
    "fr": ("pas cher", "en ligne", "promo", "2024", "meilleur prix", "acheter", "livraison gratuite", "soldes",
           "réduction", "Paris", "Lyon", "Marseille", "Toulouse", "France", "avis", "près de chez moi",
           "24h/24", "économique", "de qualité", "au meilleur prix"),
}
SPAM_PITCH = {"es": "Compre {topic} al mejor precio.", "fr": "Achetez vos {topic} au meilleur prix."}
SYLLABLES = {
    "es": ("ma", "te", "lo", "cra", "bien", "tor", "es", "qui", "de", "la", "pro", "se", "vo", "ción",
           "tra", "mi", "en", "do", "ra", "ble", "cu", "ño", "gue", "sa", "rí", "al", "ber", "tí", "pe", "os"),
    "fr": ("ma", "te", "lou", "cra", "bien", "teur", "es", "qui", "de", "la", "pro", "se", "vo", "tion",
           "tre", "mi", "en", "don", "ré", "ble", "cu", "gne", "eau", "sa", "è", "ait", "ber", "té", "pe", "ois"),
}
LOREM = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi", "aliquip", "ex", "ea", "commodo", "consequat", "duis", "aute", "irure", "in", "reprehenderit", "voluptate", "velit", "esse", "cillum", "fugiat", "nulla", "pariatur", "excepteur", "sint", "occaecat", "cupidatat", "non", "proident", "sunt", "culpa", "qui", "officia", "deserunt", "mollit", "anim", "id", "est", "laborum"]
LOREM_HEADINGS = {
    "es": ("Sobre nosotros", "Nuestros servicios", "Misión", "Contacto", "Equipo", "Proyectos"),
    "fr": ("À propos", "Nos services", "Notre mission", "Contact", "L'équipe", "Nos réalisations"),
}
LOG_WORDS = {
    "es": {"thread": "hilo", "host": "servidor",
           "events": ("Conexión establecida con", "No se pudo conectar con", "Tiempo de espera agotado en")},
    "fr": {"thread": "fil", "host": "serveur",
           "events": ("Connexion établie avec", "Impossible de se connecter à", "Délai d'attente dépassé sur")},
}
# identifiers, comments and table names of the source files (code)
CODE_WORDS = {
    "es": {"fn": "calcular", "what": ("total", "precio", "media", "saldo"), "vars": ("datos", "lista", "fila"),
           "discount": "descuento", "amount": "importe", "active": "activo", "example": "ejemplo",
           "sum": "Suma los importes y aplica el descuento", "loop": "Recorre la lista y devuelve el total",
           "customer": "cliente_id", "orders": "pedidos", "date": "fecha"},
    "fr": {"fn": "calculer", "what": ("total", "prix", "moyenne", "solde"), "vars": ("donnees", "liste", "ligne"),
           "discount": "remise", "amount": "montant", "active": "actif", "example": "exemple",
           "sum": "Additionne les montants et applique la remise", "loop": "Parcourt la liste et renvoie le total",
           "customer": "client_id", "orders": "commandes", "date": "date_commande"},
}
SHORT_TEXTS = {
    "es": ("Página no encontrada", "Error 404. La página que busca no existe.", "Cargando...",
           "Acceso denegado. Inicie sesión para continuar.", "Sitio en construcción. Vuelva pronto.",
           "Gracias por su compra."),
    "fr": ("Page introuvable", "Erreur 404. La page que vous cherchez n'existe pas.", "Chargement...",
           "Accès refusé. Connectez-vous pour continuer.", "Site en construction. Revenez bientôt.",
           "Merci pour votre commande."),
}
TABLE_HEADERS = {
    "es": (["Fecha", "Apertura", "Cierre", "Máximo", "Mínimo", "Volumen"],
           ["Estación", "Temp. (ºC)", "Humedad (%)", "Presión (hPa)", "Lluvia (mm)"],
           ["Sorteo", "N1", "N2", "N3", "N4", "N5", "N6", "Reintegro"]),
    "fr": (["Date", "Ouverture", "Clôture", "Plus haut", "Plus bas", "Volume"],
           ["Station", "Temp. (°C)", "Humidité (%)", "Pression (hPa)", "Pluie (mm)"],
           ["Tirage", "N1", "N2", "N3", "N4", "N5", "N6", "Complémentaire"]),
}
TABLE_TITLE = {"es": "Datos", "fr": "Données"}
HTML = ('<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>'
        "<body>\n{body}\n</body></html>")


def _html(title: str, body: str, lang: str) -> str:
    return HTML.format(lang=lang, title=title, body=body)


def _links(items: list[str], cls: str = "menu") -> str:
    return f'<ul class="{cls}">' + "".join(f'<li><a href="/{i.lower()}">{i}</a></li>' for i in items) + "</ul>"


# --- junk: eleven kinds, each function (rng, i, language) -> (file name, content) -------


def keyword_spam(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # SEO doorway page: the same topic in every combination, a token sentence, a tag cloud.
    mods = SPAM_MODS[lang]
    topic = SPAM_TOPICS[lang][i % len(SPAM_TOPICS[lang])]
    phrases = [f"{topic} {rng.choice(mods)}" for _ in range(rng.randint(60, 250))]
    paras = [", ".join(phrases[j:j + 15]) + "." for j in range(0, len(phrases), 15)]
    body = (f"<h1>{topic.capitalize()} {rng.choice(mods)}</h1><p>{SPAM_PITCH[lang].format(topic=topic)} "
            f"{rng.choice(SENTENCES[lang])}</p>" + "".join(f"<p>{p}</p>" for p in paras)
            + f'<div class="tags">{" | ".join(rng.sample(phrases, min(30, len(phrases))))}</div>')
    return f"spam-{i:02d}.html", _html(f"{topic} {rng.choice(mods)}", body, lang)


def menu_only(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # A landing or category page: header menu, sidebar, a grid of links, footer; no prose.
    menu, categories, (more, owner) = MENU[lang], CATEGORIES[lang], SHOP[lang]
    top = _links(rng.sample(menu, rng.randint(6, 12)))
    side = _links(rng.sample(categories, rng.randint(8, 20)), "sidebar")
    grid = "".join(f'<div class="item"><a href="/p/{j}">{rng.choice(categories)} {j}</a> <span>{more}</span></div>'
                   for j in range(rng.randint(6, 30)))
    foot = _links(rng.sample(menu, 8), "footer-links") + f"<p>{owner}</p>"
    if i % 2:  # older sites: layout tables and generic divs instead of <nav>/<footer>
        body = f'<table><tr><td>{top}</td></tr><tr><td>{side}</td><td>{grid}</td></tr></table><div>{foot}</div>'
    else:
        body = f"<header><nav>{top}</nav></header><aside>{side}</aside><main>{grid}</main><footer>{foot}</footer>"
    return f"menu-{i:02d}.html", _html(rng.choice(categories), body, lang)


def gibberish(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # Pseudo-words from the language's syllables (spun or corrupted text), or hash soup.
    if i % 4 == 3:
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(4, 16))) for _ in range(rng.randint(150, 500))]
        return f"gibberish-{i:02d}.txt", "\n".join(" ".join(words[j:j + 12]) for j in range(0, len(words), 12))
    sents = []
    for _ in range(rng.randint(15, 50)):
        words = ["".join(rng.choice(SYLLABLES[lang]) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(6, 16))]
        sents.append(" ".join(words).capitalize() + rng.choice(".,.;?"))
    return f"gibberish-{i:02d}.txt", "\n\n".join(" ".join(sents[j:j + 5]) for j in range(0, len(sents), 5))


def log_dump(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    words, categories = LOG_WORDS[lang], CATEGORIES[lang]
    lines = []
    for n in range(rng.randint(40, 300)):
        t = f"2024-03-{1 + i % 28:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        ip = f"192.168.{rng.randint(0, 9)}.{rng.randint(1, 254)}"
        lines.append([
            (f"{t},{rng.randint(100, 999)} {rng.choice(['INFO', 'WARN', 'ERROR'])} [{words['thread']}-{rng.randint(1, 8)}] "
            f"{rng.choice(words['events'])} "
            f"{ip}:{rng.choice([5432, 3306, 8080])}"),
            (f'{ip} - - [{t}] "GET /{rng.choice(categories).lower()}/{n} HTTP/1.1" {rng.choice([200, 304, 404, 500])} '
            f'{rng.randint(200, 90000)} "-" "Mozilla/5.0"'),
            (f"{t} {words['host']} sshd[{rng.randint(1000, 9999)}]: Failed password for invalid user "
            f"{rng.choice(['admin', 'root', 'test', 'oracle'])} from {ip} port {rng.randint(30000, 65000)} ssh2"),
        ][i % 3])
    return f"log-{i:02d}.txt", "\n".join(lines)


def lorem_ipsum(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # A site template nobody filled in: headings in the language, Latin filler.
    paras = [" ".join(rng.choice(LOREM) for _ in range(rng.randint(30, 90))).capitalize() + "." for _ in range(rng.randint(3, 8))]
    if i % 5:
        paras[0] = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " + paras[0]
    heads = rng.sample(LOREM_HEADINGS[lang], 3)
    body = "".join(f"<h2>{heads[j % 3]}</h2><p>{p}</p>" for j, p in enumerate(paras))
    return f"lorem-{i:02d}.html", _html(heads[0], body, lang)


def code(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # Source files with comments and identifiers in the language, as raw files or in a <pre> block.
    w = CODE_WORDS[lang]
    amount, active, discount = w["amount"], w["active"], w["discount"]
    out = []
    for f in range(rng.randint(4, 15)):
        name, var = f"{w['fn']}_{rng.choice(w['what'])}_{f}", rng.choice(w["vars"])
        out.append([
            (f"def {name}({var}, {discount}=0.{rng.randint(1, 9)}):\n    # {w['sum']}\n"
            f"    total = sum(x['{amount}'] for x in {var} if x.get('{active}'))\n    if total > {rng.randint(10, 999)}:\n"
            f"        total *= 1 - {discount}\n    return round(total, 2)\n"),
            (f"function {name}({var}) {{\n  // {w['loop']}\n  let total = 0;\n"
            f"  for (const x of {var}) {{ if (x.{active}) {{ total += x.{amount}; }} }}\n  return total.toFixed(2);\n}}\n"),
            (f"SELECT {w['customer']}, SUM({amount}) AS total\nFROM {w['orders']}\n"
            f"WHERE {w['date']} >= '2024-0{rng.randint(1, 9)}-01'\n"
            f"GROUP BY {w['customer']}\nHAVING SUM({amount}) > {rng.randint(10, 999)}\nORDER BY total DESC;\n"),
        ][(i + f) % 3])
    text = "\n".join(out)
    if i % 2:
        return f"code-{i:02d}.html", _html(f"{w['example']}{i}.py", f"<pre><code>{text}</code></pre>", lang)
    return f"code-{i:02d}.txt", text


def repeated_lines(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # A template loop gone wrong: one to three lines repeated dozens of times.
    block = rng.sample(SENTENCES[lang], rng.randint(1, 3))
    return f"repeated-{i:02d}.txt", "\n".join(block * rng.randint(15, 80))


def very_short(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    sentences = SENTENCES[lang]
    text = rng.choice((*SHORT_TEXTS[lang], rng.choice(sentences), " ".join(rng.sample(sentences, 2))))
    return (f"short-{i:02d}.html", _html(text[:20], f"<p>{text}</p>", lang)) if i % 2 else (f"short-{i:02d}.txt", text)


def number_table(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    header = rng.choice(TABLE_HEADERS[lang])
    rows = [[f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/2024"] + [f"{rng.uniform(0, 1000):.2f}".replace(".", ",")
            for _ in header[1:]] for _ in range(rng.randint(20, 200))]
    if i % 2:
        cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
        head = "".join(f"<th>{h}</th>" for h in header)
        return f"table-{i:02d}.html", _html(TABLE_TITLE[lang], f"<table><tr>{head}</tr>{cells}</table>", lang)
    return f"table-{i:02d}.txt", "\n".join(";".join(r) for r in [header, *rows])


# UTF-8 text read with the wrong charset, or lossily re-saved: damage that cleaning (ftfy)
# cannot undo. The pages are held-out good pages: only the encoding is wrong.
MOJIBAKE = ("cp1251", "gbk", "shift_jis", "koi8_r", "replace", "utf-16-swapped")


def mojibake(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    pages = good_pages(lang)
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


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def word_salad(rng: random.Random, i: int, lang: str) -> tuple[str, str]:
    # A held-out good page's prose (its <p> text, as bench/build_docs_eval.py reads it) with
    # its words shuffled across the whole document, poured back into sentences of the
    # original lengths: the language's real words at their real frequencies (stop words,
    # word lengths, no repetition), and no sentence that means anything.
    pages = good_pages(lang)
    name, html = pages[(i * 13 + 5) % len(pages)]
    paragraphs = [[s.split() for s in _SENTENCE_END.split(p)] for p in prose(html).paragraphs if p]
    words = [w.rstrip(".!?") or w for p in paragraphs for s in p for w in s]
    rng.shuffle(words)
    pool = iter(words)
    out = []
    for p in paragraphs:
        sents = [" ".join(next(pool) for _ in s) for s in p if s]
        out.append(" ".join(s[:1].upper() + s[1:].rstrip(",;:") + "." for s in sents))
    stem = name.rsplit(".", 1)[0]
    if i % 2:
        title = " ".join(words[:4])
        return f"salad-{i:02d}-{stem}.html", _html(title, "".join(f"<p>{p}</p>" for p in out), lang)
    return f"salad-{i:02d}-{stem}.txt", "\n\n".join(out)


Kind = Callable[[random.Random, int, str], tuple[str, str]]
JUNK: dict[str, Kind] = {
    "keyword_spam": keyword_spam, "menu_only": menu_only, "gibberish": gibberish, "log_dump": log_dump,
    "lorem_ipsum": lorem_ipsum, "code": code, "repeated_lines": repeated_lines, "very_short": very_short,
    "number_table": number_table, "mojibake": mojibake,
    "word_salad": word_salad,  # last: the kinds before it draw the same random numbers as before it existed
}
JUNK_KINDS = tuple(JUNK)


def junk_documents(rng: random.Random, per_kind: int = JUNK_PER_KIND, language: str = "es") -> list[tuple[str, str, str]]:
    """(kind, file name, content) for `per_kind` documents of every kind in `language`,
    deterministic in rng."""
    return [(kind, *make(rng, i, language)) for kind, make in JUNK.items() for i in range(per_kind)]
