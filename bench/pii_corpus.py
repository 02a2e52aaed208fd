"""A planted personal-data corpus: real pages with valid personal values and look-alikes
inserted at sentence boundaries, so that a redactor's recall (planted values gone) and
precision (look-alikes and clean pages intact) can be measured on text that is otherwise
real. Used by tests/pipelines/data/test_pii.py and bench/bench_pii.py.

`plant(pages, "es", seed=0, per_page=3)` gives [PlantedDoc(text, values, lookalikes), ...];
every value is valid (real check digits) and every kind and format appears within a few
dozen pages. `held_out_texts(language)` gives the plain text of the held-out GIMP manual
pages. How values are made: docs/benchmarks.md#personal-data.
"""

from __future__ import annotations

import ipaddress
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import phonenumbers
from stdnum import iban as std_iban
from stdnum import luhn
from stdnum.es import dni as std_dni
from stdnum.fr import nir as std_nir
from stdnum.it import codicefiscale as std_cf
from stdnum.pt import nif as std_nif


@dataclass(frozen=True)
class PlantedDoc:
    """A page with planted values. `values`: (kind, value exactly as written in `text`), kind
    one of pipelines.data.pii.KINDS; `lookalikes`: strings written in `text` that are not
    personal data and must survive redaction."""

    text: str
    values: list[tuple[str, str]]
    lookalikes: list[str]


# ----------------------------------------------------------------------------- values

Gen = Callable[[random.Random, str], tuple[str, str]]  # (rng, language) -> (label, value)

_FIRST = ["maria", "jose", "lucia", "pierre", "claire", "john", "emma", "javier", "ana", "luc"]
_LAST = ["garcia", "martin", "dupont", "lefebvre", "smith", "brown", "lopez", "moreau", "ruiz"]
_DOMAINS = ["gmail.com", "yahoo.es", "orange.fr", "free.fr", "outlook.com", "telefonica.net",
            "hotmail.fr", "protonmail.ch", "btinternet.com", "laposte.net"]
_ORGS = ["ferreteria-lopez.es", "cabinet-moreau.fr", "acme-logistics.co.uk", "uni-koeln.de",
         "clinica-salud.com", "mairie-lyon.fr"]
_PHONE_REGIONS = {"es": ["ES"], "fr": ["FR", "BE", "CH"], "en": ["US", "GB", "IE"],
                  "de": ["DE", "AT"], "pt": ["PT", "BR"], "it": ["IT"], "ca": ["ES"]}


def _email_plain(rng: random.Random, lang: str) -> tuple[str, str]:
    return "email", f"{rng.choice(_FIRST)}.{rng.choice(_LAST)}@{rng.choice(_DOMAINS)}"


def _email_plus(rng: random.Random, lang: str) -> tuple[str, str]:
    tag = rng.choice(["facturas", "news", "trabajo", "shop"])
    return "email", f"{rng.choice(_FIRST)}{rng.randint(1, 99)}+{tag}@{rng.choice(_DOMAINS)}"


def _email_sub(rng: random.Random, lang: str) -> tuple[str, str]:
    sub = rng.choice(["mail", "correo", "staff", "etu"])
    return "email", f"{rng.choice(_FIRST)[0]}_{rng.choice(_LAST)}@{sub}.{rng.choice(_ORGS)}"


def _valid_phone(rng: random.Random, region: str) -> phonenumbers.PhoneNumber:
    """A random number libphonenumber calls valid: the region's example number of a random
    type with its trailing digits redrawn until valid."""
    kind = rng.choice([phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE])
    example = phonenumbers.example_number_for_type(region, kind)
    digits = str(example.national_number)
    for _ in range(1000):
        keep = min(3, len(digits) - 4)
        tail = "".join(rng.choice(string.digits) for _ in range(len(digits) - keep))
        n = phonenumbers.parse("+" + str(example.country_code) + digits[:keep] + tail, None)
        if phonenumbers.is_valid_number(n) and tail.strip("0") and len(set(tail)) > 2:
            return n
    return example


def _phone_writer(style: str) -> Gen:
    def gen(rng: random.Random, lang: str) -> tuple[str, str]:
        region = rng.choice(_PHONE_REGIONS.get(lang, ["US", "GB"]))
        n = _valid_phone(rng, region)
        nat = phonenumbers.format_number(n, phonenumbers.PhoneNumberFormat.NATIONAL)
        intl = phonenumbers.format_number(n, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
        if style == "national":
            return "phone", nat
        if style == "national_dots":
            return "phone", re.sub(r"[ \-]", ".", nat.replace("(", "").replace(") ", " "))
        if style == "intl":
            return "phone", intl
        if style == "intl_dashes":
            cc, rest = intl.split(" ", 1)
            return "phone", cc + " " + rest.replace(" ", "-")
        if style == "intl_paren":
            cc, rest = intl.split(" ", 1)
            return "phone", f"({cc}) {rest}"
        return "phone", phonenumbers.format_number(n, phonenumbers.PhoneNumberFormat.E164)

    return gen


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _dni(rng: random.Random, lang: str) -> tuple[str, str]:
    digits = f"{rng.randint(1_000_000, 99_999_999):08d}"
    return "DNI", digits + std_dni.calc_check_digit(digits)


def _dni_dotted(rng: random.Random, lang: str) -> tuple[str, str]:
    d = f"{rng.randint(10_000_000, 99_999_999):08d}"
    return "DNI", f"{d[:2]}.{d[2:5]}.{d[5:]}-{std_dni.calc_check_digit(d)}"


def _nie(rng: random.Random, lang: str) -> tuple[str, str]:
    first = rng.choice("XYZ")
    d = f"{rng.randint(0, 9_999_999):07d}"
    letter = _DNI_LETTERS[int(str("XYZ".index(first)) + d) % 23]
    sep = rng.choice(["", "-"])
    return "NIE", f"{first}{sep}{d}{sep}{letter}"


def _nir_number(rng: random.Random) -> str:
    body = (f"{rng.choice('12')}{rng.randint(40, 99):02d}{rng.randint(1, 12):02d}"
            f"{rng.randint(1, 95):02d}{rng.randint(1, 990):03d}{rng.randint(1, 999):03d}")
    return body + std_nir.calc_check_digits(body)


def _nir_spaced(rng: random.Random, lang: str) -> tuple[str, str]:
    n = _nir_number(rng)
    return "NIR", f"{n[0]} {n[1:3]} {n[3:5]} {n[5:7]} {n[7:10]} {n[10:13]} {n[13:]}"


def _nir_compact(rng: random.Random, lang: str) -> tuple[str, str]:
    return "NIR", _nir_number(rng)


def _nif(rng: random.Random, lang: str) -> tuple[str, str]:
    d = f"{rng.choice('123')}{rng.randint(0, 9_999_999):07d}"
    return "NIF", d + std_nif.calc_check_digit(d)


def _codice_fiscale(rng: random.Random, lang: str) -> tuple[str, str]:
    letters = string.ascii_uppercase
    surname = "".join(rng.choice(letters) for _ in range(6))
    month = rng.choice("ABCDEHLMPRST")
    day = rng.randint(1, 28) + rng.choice([0, 40])
    town = rng.choice(letters) + f"{rng.randint(1, 999):03d}"
    body = f"{surname}{rng.randint(40, 99):02d}{month}{day:02d}{town}"
    return "codice fiscale", body + std_cf.calc_check_digit(body)


def _ssn(rng: random.Random, lang: str) -> tuple[str, str]:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return "SSN", f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


_IBAN_COUNTRIES = ["ES", "FR", "DE", "IT", "PT", "GB", "NL", "BE"]


def _iban_number(rng: random.Random) -> str:
    """A random IBAN passing mod-97 and the country's own check (drawn until valid)."""
    country = rng.choice(_IBAN_COUNTRIES)
    structure = {"ES": "20n", "FR": "23n", "DE": "18n", "IT": "1a22n", "PT": "21n",
                 "GB": "4a14n", "NL": "4a10n", "BE": "12n"}[country]
    for _ in range(5000):
        bban = ""
        for count, cls in re.findall(r"(\d+)([an])", structure):
            pool = string.ascii_uppercase if cls == "a" else string.digits
            bban += "".join(rng.choice(pool) for _ in range(int(count)))
        number = country + std_iban.calc_check_digits(country + "00" + bban) + bban
        if std_iban.is_valid(number):
            return number
    raise RuntimeError(f"no valid IBAN drawn for {country}")


def _iban_spaced(rng: random.Random, lang: str) -> tuple[str, str]:
    return "IBAN", std_iban.format(_iban_number(rng))


def _iban_compact(rng: random.Random, lang: str) -> tuple[str, str]:
    return "IBAN", _iban_number(rng)


def _card_number(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    return body + luhn.calc_check_digit(body)


def _card_writer(sep: str) -> Gen:
    def gen(rng: random.Random, lang: str) -> tuple[str, str]:
        prefix = rng.choice(["4", "51", "53", "55", "2221", "6011"])
        n = _card_number(rng, prefix, 16)
        return "card", sep.join(n[i:i + 4] for i in range(0, 16, 4))

    return gen


def _card_amex(rng: random.Random, lang: str) -> tuple[str, str]:
    n = _card_number(rng, rng.choice(["34", "37"]), 15)
    return "card", f"{n[:4]} {n[4:10]} {n[10:]}"


def _ipv4(rng: random.Random, lang: str) -> tuple[str, str]:
    while True:
        a = ipaddress.IPv4Address(rng.randint(0x0B000000, 0xDEFFFFFF))
        if a.is_global and not str(a).startswith(("100.", "198.18.", "198.19.")):
            return "IP", str(a)


def _ipv6(rng: random.Random, lang: str) -> tuple[str, str]:
    prefix = rng.choice([0x2A00, 0x2A01, 0x2A02, 0x2600, 0x2604, 0x2C0F, 0x2400])
    groups = [prefix] + [rng.randint(1, 0xFFFF) for _ in range(7)]
    a = ipaddress.IPv6Address(":".join(f"{g:x}" for g in groups))
    if rng.random() < 0.5:
        a = ipaddress.IPv6Address(":".join(f"{g:x}" for g in groups[:4]) + "::" + f"{groups[7]:x}")
    return "IP", a.compressed


_B62 = string.ascii_letters + string.digits


def _rand(rng: random.Random, n: int, alphabet: str = _B62) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _aws(rng: random.Random, lang: str) -> tuple[str, str]:
    return "AWS", "AKIA" + _rand(rng, 16, string.ascii_uppercase + "234567")


def _github(rng: random.Random, lang: str) -> tuple[str, str]:
    return "GitHub", "ghp_" + _rand(rng, 36)


def _slack(rng: random.Random, lang: str) -> tuple[str, str]:
    return "Slack", f"xoxb-{rng.randint(10**10, 10**11)}-{rng.randint(10**11, 10**12)}-{_rand(rng, 24)}"


def _stripe(rng: random.Random, lang: str) -> tuple[str, str]:
    return "Stripe", "sk_live_" + _rand(rng, 24)


def _google(rng: random.Random, lang: str) -> tuple[str, str]:
    return "Google API", "AIza" + _rand(rng, 35, _B62 + "-_")


def _jwt(rng: random.Random, lang: str) -> tuple[str, str]:
    return "JWT", f"eyJhbGciOiJIUzI1NiJ9.eyJ{_rand(rng, 40)}.{_rand(rng, 43, _B62 + '-_')}"


def _pem(rng: random.Random, lang: str) -> tuple[str, str]:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    lines = [_rand(rng, 64, _B62 + "+/") for _ in range(rng.randint(3, 8))]
    body = "\n".join(lines)
    return "PEM", f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def _password(rng: random.Random, lang: str) -> tuple[str, str]:
    """A human-ish random password with lower, upper, digit and symbol."""
    n = rng.randint(12, 20)
    chars = [rng.choice(string.ascii_lowercase), rng.choice(string.ascii_uppercase),
             rng.choice(string.digits), rng.choice("!$%&*#@?")]
    chars += [rng.choice(_B62 + "!$%&*#") for _ in range(n - 4)]
    rng.shuffle(chars)
    return "password", "".join(chars)


def _api_token(rng: random.Random, lang: str) -> tuple[str, str]:
    return "token", _rand(rng, rng.choice([24, 32, 40]), string.ascii_lowercase + string.digits)


# (kind, generator) for every written format; the label the generator returns picks the
# carrier sentence (context words an identifier needs, like "NIF" or "password:").
GENERATORS: list[tuple[str, Gen]] = [
    ("email", _email_plain), ("email", _email_plus), ("email", _email_sub),
    *[("phone", _phone_writer(s)) for s in
      ("national", "national_dots", "intl", "intl_dashes", "intl_paren", "e164")],
    ("national_id", _dni), ("national_id", _dni_dotted), ("national_id", _nie),
    ("national_id", _nir_spaced), ("national_id", _nir_compact), ("national_id", _nif),
    ("national_id", _codice_fiscale), ("national_id", _ssn),
    ("iban", _iban_spaced), ("iban", _iban_compact),
    ("card", _card_writer(" ")), ("card", _card_writer("-")), ("card", _card_writer("")),
    ("card", _card_amex),
    ("ip_address", _ipv4), ("ip_address", _ipv4), ("ip_address", _ipv6),
    ("credential", _aws), ("credential", _github), ("credential", _slack),
    ("credential", _stripe), ("credential", _google), ("credential", _jwt),
    ("credential", _pem), ("credential", _password), ("credential", _api_token),
]

# ----------------------------------------------------------------------------- carriers
# {v}: the value; {l}: the generator's label. Per kind, or per label where the label needs
# its own context (a NIF or SSN is only recognised beside its name, a password beside
# "password").
_CARRIERS: dict[str, dict[str, list[str]]] = {
    "es": {
        "email": ["Para cualquier duda, escriba a {v} y le responderemos.",
                  "La autora del capítulo ({v}) agradece las correcciones."],
        "phone": ["Puede llamar al servicio técnico al {v} de lunes a viernes.",
                  "Teléfono de contacto: {v}."],
        "national_id": ["El titular se identificó con su {l} {v} al firmar el contrato.",
                        "Datos del solicitante: {l} {v}, domicilio en Madrid."],
        "iban": ["Haga la transferencia a la cuenta {v} indicando el número de factura.",
                 "IBAN del beneficiario: {v}."],
        "card": ["El pago se hizo con la tarjeta {v}, que caduca el año que viene.",
                 "Número de tarjeta: {v}."],
        "ip_address": ["El servidor público responde en la dirección {v} desde ayer.",
                       "Las peticiones llegaban desde {v} cada pocos segundos."],
        "credential": ["Añada la clave {v} al fichero de configuración del servidor.",
                       "La credencial de despliegue era {v} y se revocó después."],
        "password": ["Para entrar use usuario admin y contraseña: {v} en el primer acceso.",
                     "En el fichero .env ponga DB_PASSWORD={v} y reinicie."],
        "token": ["Configure el token: {v} en las opciones de la extensión.",
                  "La clave de la API es {v} y no debe compartirse."],
        "PEM": ["La clave privada del servidor es esta:\n{v}\nGuárdela en lugar seguro."],
        "NIF": ["La empresa portuguesa tiene el NIF {v} según la factura."],
        "SSN": ["Su número de la seguridad social estadounidense (SSN) es {v}."],
    },
    "fr": {
        "email": ["Pour toute question, écrivez à {v} et nous vous répondrons.",
                  "L'auteur du chapitre ({v}) remercie les relecteurs."],
        "phone": ["Vous pouvez appeler le support au {v} du lundi au vendredi.",
                  "Téléphone : {v}."],
        "national_id": ["Le titulaire a présenté son {l} {v} lors de la signature.",
                        "Données du demandeur : {l} {v}, domicilié à Lyon."],
        "iban": ["Effectuez le virement sur le compte {v} en indiquant la facture.",
                 "IBAN du bénéficiaire : {v}."],
        "card": ["Le paiement a été fait avec la carte {v}, qui expire l'an prochain.",
                 "Numéro de carte : {v}."],
        "ip_address": ["Le serveur public répond à l'adresse {v} depuis hier.",
                       "Les requêtes venaient de {v} toutes les quelques secondes."],
        "credential": ["Ajoutez la clé {v} au fichier de configuration du serveur.",
                       "L'identifiant de déploiement était {v} et il a été révoqué."],
        "password": [("Connectez-vous avec l'utilisateur admin et le mot de passe : {v} la "
                      "première fois."),
                     "Dans le fichier .env, mettez DB_PASSWORD={v} puis redémarrez."],
        "token": ["Configurez le token : {v} dans les options de l'extension.",
                  "La clé API est {v} et ne doit pas être partagée."],
        "PEM": ["Voici la clé privée du serveur :\n{v}\nConservez-la en lieu sûr."],
        "NIF": ["La société portugaise a le NIF {v} d'après la facture."],
        "SSN": ["Son numéro de sécurité sociale américain (SSN) est {v}."],
    },
    "en": {
        "email": ["For any question, write to {v} and we will answer.",
                  "The chapter's author ({v}) thanks the proofreaders."],
        "phone": ["You can call support at {v} from Monday to Friday.",
                  "Phone: {v}."],
        "national_id": ["The holder showed the {l} {v} when signing the contract.",
                        "Applicant details: {l} {v}, living in Leeds."],
        "iban": ["Please transfer the amount to account {v} quoting the invoice number.",
                 "Beneficiary IBAN: {v}."],
        "card": ["The payment was made with card {v}, which expires next year.",
                 "Card number: {v}."],
        "ip_address": ["The public server answers at {v} since yesterday.",
                       "Requests came from {v} every few seconds."],
        "credential": ["Add the key {v} to the server's configuration file.",
                       "The deployment credential was {v} and it was revoked later."],
        "password": ["Log in as admin with password: {v} the first time.",
                     "In the .env file set DB_PASSWORD={v} and restart."],
        "token": ["Set the token: {v} in the extension's options.",
                  "The API key is {v} and must not be shared."],
        "PEM": ["Here is the server's private key:\n{v}\nKeep it somewhere safe."],
        "NIF": ["The Portuguese company's NIF is {v} according to the invoice."],
        "SSN": ["His social security number (SSN) is {v}."],
    },
}

# Look-alikes: (template with {v}, value) drawn per language; each must stay as written.
LookGen = Callable[[random.Random], str]


def _bad_luhn(rng: random.Random) -> str:
    n = _card_number(rng, "4", 16)
    n = n[:-1] + str((int(n[-1]) + 1) % 10)
    return " ".join(n[i:i + 4] for i in range(0, 16, 4))


def _bad_dni(rng: random.Random) -> str:
    d = f"{rng.randint(10_000_000, 99_999_999):08d}"
    right = std_dni.calc_check_digit(d)
    return d + _DNI_LETTERS[(_DNI_LETTERS.index(right) + 1) % 23]


def _bad_iban(rng: random.Random) -> str:
    n = _iban_number(rng)
    check = (int(n[2:4]) + 1) % 100
    return std_iban.format(n[:2] + f"{check:02d}" + n[4:])


PII_LOOKALIKES: dict[str, tuple[LookGen, dict[str, str]]] = {
    "version": (lambda r: f"{r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 40)}",
                {"es": "La versión {v} corrige varios errores.",
                 "fr": "La version {v} corrige plusieurs bogues.",
                 "en": "Version {v} fixes several bugs."}),
    "version4": (lambda r: f"{r.randint(1, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}",
                 {"es": "Instale la versión {v} del complemento.",
                  "fr": "Installez la version {v} du greffon.",
                  "en": "Install version {v} of the plug-in."}),
    "date_iso": (lambda r: f"20{r.randint(10, 29)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                 {"es": "Publicado el {v}.", "fr": "Publié le {v}.", "en": "Published on {v}."}),
    "date_eu": (lambda r: f"{r.randint(1, 28):02d}/{r.randint(1, 12):02d}/20{r.randint(10, 29)}",
                {"es": "Fecha de la última revisión: {v}.",
                 "fr": "Date de la dernière révision : {v}.",
                 "en": "Last revised: {v}."}),
    "time": (lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
             {"es": "La copia empezó a las {v} y tardó una hora.",
              "fr": "La sauvegarde a commencé à {v} et a duré une heure.",
              "en": "The backup started at {v} and took an hour."}),
    "bug": (lambda r: f"#{r.randint(100_000, 9_999_999)}",
            {"es": "Este fallo está descrito en el informe {v}.",
             "fr": "Ce bogue est décrit dans le rapport {v}.",
             "en": "This bug is tracked as issue {v}."}),
    "price": (lambda r: f"{r.randint(1, 99)}.{r.randint(100, 999)},{r.randint(0, 99):02d} €",
              {"es": "El presupuesto total asciende a {v} con impuestos.",
               "fr": "Le budget total s'élève à {v} toutes taxes comprises.",
               "en": "The total budget comes to {v} including taxes."}),
    "price_big": (lambda r: f"{r.randint(100, 999)} {r.randint(100, 999)} {r.randint(100, 999)} €",
                  {"es": "La facturación anual fue de {v}.",
                   "fr": "Le chiffre d'affaires annuel était de {v}.",
                   "en": "Annual revenue was {v}."}),
    "sha1": (lambda r: _rand(r, 40, "0123456789abcdef"),
             {"es": "El cambio está en el commit {v} del repositorio.",
              "fr": "Le changement est dans le commit {v} du dépôt.",
              "en": "The change is in commit {v} of the repository."}),
    "sha256": (lambda r: _rand(r, 64, "0123456789abcdef"),
               {"es": "Suma de control SHA-256: {v}.",
                "fr": "Somme de contrôle SHA-256 : {v}.",
                "en": "SHA-256 checksum: {v}."}),
    "private_ip": (lambda r: r.choice([f"192.168.{r.randint(0, 255)}.{r.randint(1, 254)}",
                                      f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
                                      f"172.{r.randint(16, 31)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
                                      "127.0.0.1"]),
                   {"es": "Configure el router en {v} y guarde los cambios.",
                    "fr": "Configurez le routeur sur {v} puis enregistrez.",
                    "en": "Set the router to {v} and save the changes."}),
    "doc_ip": (lambda r: r.choice([f"192.0.2.{r.randint(1, 254)}", f"198.51.100.{r.randint(1, 254)}",
                                  f"203.0.113.{r.randint(1, 254)}", f"2001:db8::{r.randint(1, 0xFFFF):x}",
                                  "fe80::1", "::1"]),
               {"es": "En el ejemplo, el servidor escucha en {v}.",
                "fr": "Dans l'exemple, le serveur écoute sur {v}.",
                "en": "In the example, the server listens on {v}."}),
    "example_email": (lambda r: f"{r.choice(_FIRST)}@" + r.choice(
        ["example.com", "example.org", "mail.example.net", "docs.example", "host.test",
         "foo.invalid", "localhost"]),
                      {"es": "Por ejemplo, escriba {v} en el campo del remitente.",
                       "fr": "Par exemple, saisissez {v} dans le champ de l'expéditeur.",
                       "en": "For example, type {v} in the sender field."}),
    "isbn": (lambda r: f"978-{r.randint(1, 99)}-{r.randint(100, 9999)}-{r.randint(100, 9999)}-{r.randint(0, 9)}",
             {"es": "Véase el libro con ISBN {v}.",
              "fr": "Voir le livre ISBN {v}.",
              "en": "See the book with ISBN {v}."}),
    "order": (lambda r: f"{r.randint(2015, 2029)}-{r.randint(0, 999_999):06d}",
              {"es": "Su pedido n.º {v} saldrá mañana.",
               "fr": "Votre commande n° {v} partira demain.",
               "en": "Your order no. {v} ships tomorrow."}),
    "postal": (lambda r: f"{r.randint(1000, 52999):05d}",
               {"es": "La oficina está en el código postal {v}.",
                "fr": "Le bureau se trouve au code postal {v}.",
                "en": "The office is at ZIP code {v}."}),
    "port": (lambda r: f"localhost:{r.choice([8080, 3000, 5432, 8443, 6379])}",
             {"es": "Abra {v} en el navegador.", "fr": "Ouvrez {v} dans le navigateur.",
              "en": "Open {v} in the browser."}),
    "bad_card": (_bad_luhn,
                 {"es": "El número {v} no es válido y la tienda lo rechazó.",
                  "fr": "Le numéro {v} n'est pas valide et le site l'a refusé.",
                  "en": "The number {v} is not valid and the shop rejected it."}),
    "bad_dni": (_bad_dni,
                {"es": "El código {v} tiene la letra mal.",
                 "fr": "Le code {v} a une lettre fausse.",
                 "en": "The code {v} has the wrong letter."}),
    "bad_iban": (_bad_iban,
                 {"es": "La referencia {v} no supera la comprobación.",
                  "fr": "La référence {v} ne passe pas le contrôle.",
                  "en": "Reference {v} fails the check."}),
    "placeholder_password": (lambda r: r.choice(["<your-password>", "********", "changeme",
                                                 "xxxxxxxxxxxx", "${DB_PASSWORD}", "YOUR_API_KEY"]),
                             {"es": "En el ejemplo, ponga password: {v} en la configuración.",
                              "fr": "Dans l'exemple, mettez password: {v} dans la configuration.",
                              "en": "In the example, put password: {v} in the configuration."}),
    "aws_example": (lambda r: "AKIAIOSFODNN7EXAMPLE",
                    {"es": "La documentación usa la clave de ejemplo {v}.",
                     "fr": "La documentation utilise la clé d'exemple {v}.",
                     "en": "The documentation uses the sample key {v}."}),
    "dimensions": (lambda r: f"{r.randint(100, 4000)}x{r.randint(100, 4000)}",
                   {"es": "La imagen mide {v} píxeles.", "fr": "L'image mesure {v} pixels.",
                    "en": "The image is {v} pixels."}),
    "big_number": (lambda r: f"{r.randint(1, 9)} {r.randint(100, 999)} {r.randint(100, 999)}",
                   {"es": "Se descargó {v} veces.", "fr": "Il a été téléchargé {v} fois.",
                    "en": "It was downloaded {v} times."}),
}

LOOKALIKE_KINDS = tuple(PII_LOOKALIKES)


def carrier_sentence(rng: random.Random, language: str, kind: str, label: str, value: str) -> str:
    table = _CARRIERS.get(language, _CARRIERS["en"])
    templates = table.get(label) or table[kind]
    return rng.choice(templates).format(v=value, l=label)


def _boundaries(page: str) -> list[int]:
    """Offsets just after a sentence end or line break, where a sentence may go in."""
    return [m.end() for m in re.finditer(r"(?<=[.!?:])[ \t]+(?=[A-ZÀ-Ý¿¡])|\n+", page)] or [len(page)]


def plant(pages: list[str], language: str, seed: int = 0, per_page: int = 3) -> list[PlantedDoc]:
    """One PlantedDoc per page: `per_page` valid values and `per_page` look-alikes, each in
    its own carrier sentence inserted at a sentence boundary of the page. Deterministic in
    (pages, language, seed, per_page); value kinds and formats are dealt round-robin from a
    shuffled deck, so every format appears once the pages hold len(GENERATORS) values."""
    rng = random.Random(f"pii-corpus:{language}:{seed}")
    deck = list(range(len(GENERATORS)))
    rng.shuffle(deck)
    looks = list(LOOKALIKE_KINDS)
    rng.shuffle(looks)
    out: list[PlantedDoc] = []
    dealt = 0
    for page_no, page in enumerate(pages):
        inserts: list[tuple[str, str | None, str]] = []  # (sentence, kind, value)
        values: list[tuple[str, str]] = []
        lookalikes: list[str] = []
        for _ in range(per_page):
            kind, gen = GENERATORS[deck[dealt % len(deck)]]
            dealt += 1
            label, value = gen(rng, language)
            values.append((kind, value))
            inserts.append((carrier_sentence(rng, language, kind, label, value), kind, value))
        for j in range(per_page):
            make, templates = PII_LOOKALIKES[looks[(page_no * per_page + j) % len(looks)]]
            value = make(rng)
            lookalikes.append(value)
            template = templates.get(language, templates["en"])
            inserts.append((template.format(v=value), None, value))
        rng.shuffle(inserts)
        spots = _boundaries(page)
        where = sorted(rng.choice(spots) for _ in inserts)
        text, last = [], 0
        for at, (sentence, _, _) in zip(where, inserts):
            text.append(page[last:at])
            glue = "" if at == 0 or page[at - 1].isspace() else " "
            text.append(glue + sentence + ("\n" if at > 0 and page[at - 1] == "\n" else " "))
            last = at
        text.append(page[last:])
        out.append(PlantedDoc("".join(text), values, lookalikes))
    return out


@cache
def held_out_texts(language: str) -> tuple[str, ...]:
    """Plain text (the pipeline's default extractor) of every held-out GIMP manual page in
    `language` (tests/data/docs_eval)."""
    import gzip
    import json
    from pathlib import Path

    from pipelines.data.extract import html_to_text

    # the file tests/support/docs_eval_pages.py reads (bench does not import tests)
    path = Path(__file__).parents[1] / "tests" / "data" / "docs_eval" / f"gimp-help-{language}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        pages = [json.loads(line)["html"] for line in f]
    return tuple(t for t in (html_to_text(html) for html in pages) if t.strip())
