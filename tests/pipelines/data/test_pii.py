"""Personal data detection and redaction (pipelines/data/pii/): planted values of every
kind and format are replaced, look-alikes stay, per-kind actions behave, and the figures
the issue asks for hold on the held-out GIMP manual pages (tests/data/docs_eval):

    .venv/bin/python -m pytest -q tests/pipelines/data/test_pii.py -s     # prints the held-out table
"""

from __future__ import annotations

import pickle
import random
import re
import time
from collections import Counter
from itertools import pairwise

import pytest
from stdnum import iban as std_iban

from bench.pii_corpus import (
    GENERATORS,
    LOOKALIKE_KINDS,
    PII_LOOKALIKES,
    PlantedDoc,
    carrier_sentence,
    held_out_texts,
    plant,
)
from pipelines.config import PiiConfig
from pipelines.data.pii import KINDS, PLACEHOLDERS, Finding, Redaction, Redactor, mask

LANGUAGES = ("es", "fr", "en")


def test_contract_names() -> None:
    assert KINDS == ("email", "phone", "national_id", "iban", "card", "ip_address", "credential", "person")
    assert PLACEHOLDERS == {
        "email": "<EMAIL>", "phone": "<PHONE>", "national_id": "<NATIONAL_ID>",
        "iban": "<IBAN>", "card": "<CARD>", "ip_address": "<IP_ADDRESS>",
        "credential": "<CREDENTIAL>", "person": "<PERSON>",
    }


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("index", range(len(GENERATORS)))
def test_every_format_is_redacted(index: int, language: str) -> None:
    """Each written format of each kind, 15 random valid values in the language's carrier
    sentences: the value is gone, its kind's placeholder is there, counted once."""
    kind, gen = GENERATORS[index]
    rng = random.Random(f"{index}:{language}")
    r = Redactor(PiiConfig(), language)
    for _ in range(15):
        label, value = gen(rng, language)
        text = "Introducción al capítulo. " + carrier_sentence(rng, language, kind, label, value) + " Fin."
        out = r.redact(text)
        assert value not in out.text, (kind, label, value, out.text)
        assert PLACEHOLDERS[kind] in out.text, (kind, label, value, out.text)
        assert out.counts == {kind: 1}, (value, out.counts, r.find(text))
        assert out.drop is None


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("name", LOOKALIKE_KINDS)
def test_generated_lookalikes_stay(name: str, language: str) -> None:
    make, templates = PII_LOOKALIKES[name]
    rng = random.Random(f"{name}:{language}")
    r = Redactor(PiiConfig(), language)
    for _ in range(25):
        text = templates.get(language, templates["en"]).format(v=make(rng))
        assert r.find(text) == [], (text, [(f.kind, text[f.start:f.end]) for f in r.find(text)])


# Written by hand: what a manual, a changelog or a bug report holds that is not personal.
LOOKALIKES = [
    "ISBN 978-0-306-40615-7 and ISBN 0-306-40615-2.",
    "Order #123-456-7890 shipped; ticket 4155552671 closed; bug #1234567.",
    "Released 2024-05-06 at 10:30:00 as v1.2.3, then version 1.2.3.4 and 10.0.19041.1.",
    "It costs $1,299.99 or 1.234.567,89 € or 12 345 678 € for 1,234,567 units.",
    ("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 and commit "
     "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3."),
    "Local 127.0.0.1:8080, 192.168.0.1, 10.0.0.1, 172.16.0.1, 169.254.1.1, 100.64.0.1.",
    "Documentation 192.0.2.1, 198.51.100.7, 203.0.113.9, 2001:db8:85a3::8a2e:370:7334.",
    "Loopback ::1, link-local fe80::1ff:fe23:4567:890a, unique local fd12:3456:789a::1.",
    "UUID 123e4567-e89b-12d3-a456-426614174000 and timestamp 1714564800.",
    "Screen 1024x768, color #ff0000, U+00E9, RGB 255 255 255.",
    "Coordinates 40.416775, -3.703790 and 48.8566 2.3522.",
    "MAC 00:1a:2b:3c:4d:5e, time 12:30:45.123, C++ std::vector<int>::iterator.",
    "Section 11.13.3.1 and figure 5.11.3.2 describe the dialog.",
    "The range 1000-2000-3000 and 2024/05/06 and 06.05.2024.",
    "Write to usuario@example.com, soporte@docs.example, a@b.test, x@y.invalid, root@localhost.",
    "Image icon@2x.png, npm install lodash@4.17.21, @media screen, git@github.com:user/repo.git.",
    ("The AWS docs use AKIAIOSFODNN7EXAMPLE; ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx is a "
     "placeholder."),
    "password: <your-password>; contraseña: ********; pwd=changeme; token=${API_TOKEN};",
    "api_key = \"YOUR_API_KEY\"; secret: %SECRET%; mot de passe : xxxxxxxxxx.",
    "The token is used to authenticate. La contraseña es obligatoria. Passwort vergessen?",
    "Set the password for user admin to the value shown on the screen.",
    ("Test cards 4111 1111 1111 1111 and 5555 5555 5555 4444 are documented by every "
     "payment provider."),
    "The SSN 123-45-6789 on the form is an example; 078-05-1120 was on a wallet insert.",
    "Postal codes 28013 Madrid, 75008 Paris, CP 08001.",
    "When `delay` is larger than `2147483647`; \"total_memory\": \"17179869184\".",
    "blockList.check('123.123.123.123'); check('::ffff:222.111.111.222', 'ipv6');",
    "Resolvers 8.8.8.8, 1.1.1.1, 2001:4860:4860::8888; multicast 224.0.0.114.",
    "Pass LIBPFM4_ARCH_FLAG to make; pass `logits_cache=False`; pass --docdir=/usr/share.",
    "key: fs.readFileSync('server-key.pem'); publicKey = cert.exportPublicKey(spkac);",
    "Date:   Tue Jun 8 19:04:01 2010 -0700",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
]


@pytest.mark.parametrize("language", LANGUAGES)
def test_written_lookalikes_stay(language: str) -> None:
    r = Redactor(PiiConfig(), language)
    for text in LOOKALIKES:
        found = [(f.kind, text[f.start:f.end]) for f in r.find(text)]
        assert found == [], (text, found)


# Written by hand, in formats the generator does not produce: (language, text, kind).
WRITTEN_VALUES = [
    ("es", "Llame al +34-612-345-678.", "phone"),
    ("es", "Tel.: 91 123 45 67.", "phone"),
    ("es", "Mi móvil es 612.345.678", "phone"),
    ("es", "Whatsapp 612-34-56-78", "phone"),
    ("es", "Teléfono (+34) 612345678", "phone"),
    ("es", "tel 0034 612 34 56 78", "phone"),
    ("es", "DNI 12345678 Z.", "national_id"),
    ("es", "NIE x1234567l.", "national_id"),
    ("es", "Correo JOHN.SMITH@GMAIL.COM.", "email"),
    ("es", "Cuenta ES91-2100-0418-4502-0005-1332.", "iban"),
    ("fr", "Appelez le +33 (0)6 12 34 56 78.", "phone"),
    ("fr", "Tél. 01.23.45.67.89", "phone"),
    ("fr", "Tél : 06-12-34-56-78", "phone"),
    ("fr", "Standard +41 44 668 18 00.", "phone"),
    ("fr", "NIR 2 85 02 75 116 042 17", "national_id"),
    ("en", "Call +44 (0)20 7946 0958 now.", "phone"),
    ("en", "Call (415) 555-2671.", "phone"),
    ("en", "Phone: 415.555.2671", "phone"),
    ("en", "SSN: 536 90 4399", "national_id"),
    ("en", "my ssn is 536904399", "national_id"),
    ("en", "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Lp3TuV2", "credential"),
    ("en", ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEF'
           '\\n-----END PRIVATE KEY-----\\n"}'), "credential"),
    ("en", ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3"
           "jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"), "credential"),
]


@pytest.mark.parametrize(("language", "text", "kind"), WRITTEN_VALUES)
def test_written_values_are_found(language: str, text: str, kind: str) -> None:
    found = Redactor(PiiConfig(), language).find(text)
    assert [f.kind for f in found] == [kind], (text, [(f.kind, text[f.start:f.end]) for f in found])


def test_placeholders_counts_and_clean_text() -> None:
    r = Redactor(PiiConfig(), "es")
    text = ("Escriba a ana.ruiz@gmail.com o a luis@correo.telefonica.net, o llame al "
            "+34 612 34 56 78. La IP 83.45.120.7 es pública; la 192.168.1.1 no.")
    out = r.redact(text)
    assert out == Redaction(
        "Escriba a <EMAIL> o a <EMAIL>, o llame al <PHONE>. La IP <IP_ADDRESS> es pública; "
        "la 192.168.1.1 no.",
        {"email": 2, "phone": 1, "ip_address": 1},
        None,
    )
    clean = "Un texto sin datos personales: versión 2.10.34, 14:30, 1.234,56 €."
    assert r.redact(clean) == Redaction(clean, {}, None)
    assert r.redact_many([text, clean]) == [out, Redaction(clean, {}, None)]


def test_actions_keep_and_drop() -> None:
    text = ("Mail ana.ruiz@gmail.com, card 4929 1234 5678 9018? no: card 4539 5787 6362 1486, "
            "DNI 12345678Z, phone +33 6 12 34 56 78.")
    cfg = PiiConfig(email="keep", card="drop_document", national_id="drop_document")
    out = Redactor(cfg, "fr").redact(text)
    assert "ana.ruiz@gmail.com" in out.text  # kept, still counted
    assert out.counts == {"email": 1, "phone": 1, "national_id": 1, "card": 1}
    # Drop kinds are redacted too (the rejected store never holds a value in clear); the
    # reported kind is the first in KINDS order.
    assert "4539 5787 6362 1486" not in out.text and "12345678Z" not in out.text
    assert "<CARD>" in out.text and "<NATIONAL_ID>" in out.text and "<PHONE>" in out.text
    assert out.drop == "national_id"
    assert "4929 1234 5678 9018" in out.text  # fails Luhn: not a card
    nothing = PiiConfig(**{k: "keep" for k in KINDS})
    kept = Redactor(nothing, "fr").redact(text)
    assert kept.text == text and kept.drop is None and kept.counts == out.counts


def test_overlaps_resolve_by_priority() -> None:
    r = Redactor(PiiConfig(), "es")
    pem = ("-----BEGIN RSA PRIVATE KEY-----\npassword: Xk9#mP2$vL7q\n"
           "MIIEowIBAAKCAQEA7bq98tZ4s0V1N2wq3lF6uAqTS3pQ9rRjL3a1Fh2vE8Y+\n"
           "-----END RSA PRIVATE KEY-----")
    cases = {
        # An IBAN's digits hold a Luhn-valid run and phone-like groups: one IBAN.
        "Cuenta ES91 2100 0418 4502 0005 1332 del titular.": {"iban": 1},
        # A phone number as an address's local part: one address.
        "Escriba a 612345678@gmail.com hoy.": {"email": 1},
        # A key and a password inside a private-key block: one credential.
        f"Clave:\n{pem}\nFin.": {"credential": 1},
        # A prefixed key after "token:": one credential.
        "token: ghp_8fK2mQ9xL3vR7tY1wZ5nB0cD4hJ6gP2sA8eU": {"credential": 1},
    }
    for text, counts in cases.items():
        found = r.find(text)
        assert Counter(f.kind for f in found) == counts, (text, found)
        assert all(a.end <= b.start for a, b in pairwise(found))
    out = r.redact(f"Clave:\n{pem}\nFin.")
    assert out.text == "Clave:\n<CREDENTIAL>\nFin."


def test_find_is_sorted_and_spans_are_values() -> None:
    doc = plant(["Primera frase. Segunda frase. Tercera frase."] * 3, "es", seed=5, per_page=6)
    r = Redactor(PiiConfig(), "es")
    for d in doc:
        found = r.find(d.text)
        assert found == sorted(found, key=lambda f: f.start)
        assert all(isinstance(f, Finding) and f.start < f.end for f in found)
        assert sorted(d.text[f.start:f.end] for f in found) == sorted(v for _, v in d.values)


def test_allow_domains_and_phone_regions() -> None:
    text = "Docs at docs@gimp.org and wiki@wiki.gimp.org; mail ana@gimp.com."
    out = Redactor(PiiConfig(allow_domains=["gimp.org"]), "en").redact(text)
    assert out.text == "Docs at docs@gimp.org and wiki@wiki.gimp.org; mail <EMAIL>."
    text = "Call (415) 555-2671, 612 34 56 78 or +34 612 34 56 78."
    us = Redactor(PiiConfig(phone_regions=["US"]), "es").redact(text)
    assert us.text == "Call <PHONE>, 612 34 56 78 or <PHONE>."
    es = Redactor(PiiConfig(), "es").redact(text)
    assert es.text == "Call (415) 555-2671, <PHONE> or <PHONE>."


def test_mask_hides_values() -> None:
    assert mask("john.smith@gmail.com") == "j***@g***.com"
    assert mask("+34 612 34 56 78") == "+34 6** ** ** *8"
    assert mask("12345678Z") == "1*******Z"
    assert mask("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----") == (
        "-----BEGIN RSA PRIVATE KEY----- *** -----END RSA PRIVATE KEY-----"
    )
    rng = random.Random(3)
    for kind, gen in GENERATORS:
        for _ in range(5):
            _, value = gen(rng, "fr")
            shown = mask(value)
            if "PRIVATE KEY" in value:  # the header says the kind; nothing of the body shows
                assert re.fullmatch(r"-----BEGIN [A-Z ]*PRIVATE KEY----- \*\*\* -----END [A-Z ]*"
                                    r"PRIVATE KEY-----", shown), shown
                continue
            assert value not in shown and shown, (value, shown)
            alnum = [c for c in value if c.isalnum()]
            revealed = [c for c in shown if c.isalnum()]
            # a prefix (+34, ES, ghp_, AKIA, github_pat_) and two characters at most
            assert len(revealed) <= 13, (kind, value, shown)
            if len(alnum) >= 12:
                assert len(revealed) <= len(alnum) / 2, (kind, value, shown)


def test_redactor_is_cheap_and_picklable() -> None:
    t = time.perf_counter()
    for _ in range(1000):
        r = Redactor(PiiConfig(), "fr")
    assert (time.perf_counter() - t) / 1000 < 1e-3
    clone = pickle.loads(pickle.dumps(r))
    text = "Appelez le 06 12 34 56 78."
    assert clone.redact(text) == r.redact(text)


def test_plant_is_deterministic_and_valid() -> None:
    pages = ["Una frase.\nOtra frase. Y otra más."] * 40
    a, b = plant(pages, "es", seed=1), plant(pages, "es", seed=1)
    assert a == b and a != plant(pages, "es", seed=2)
    assert all(isinstance(d, PlantedDoc) for d in a)
    kinds = Counter(k for d in a for k, _ in d.values)
    assert set(kinds) == set(KINDS) - {"person"}  # names are a model's (tests/pipelines/data/test_pii_names.py)
    for d in a:
        assert len(d.values) == 3 and len(d.lookalikes) == 3
        assert all(v in d.text for _, v in d.values) and all(v in d.text for v in d.lookalikes)
        for kind, v in d.values:
            if kind == "iban":
                assert std_iban.is_valid(v)


def _measure(language: str, seeds: range) -> dict[str, tuple[int, int]]:
    """Planted values gone, look-alikes intact and clean pages unchanged, per kind, on the
    held-out pages of `language`; plus throughput."""
    pages = list(held_out_texts(language))
    r = Redactor(PiiConfig(), language)
    tally: dict[str, list[int]] = {}

    def add(key: str, ok: bool) -> None:
        tally.setdefault(key, [0, 0])
        tally[key][0] += ok
        tally[key][1] += 1

    t = time.process_time()
    clean = r.redact_many(pages)
    clean_s = time.process_time() - t
    for page, out in zip(pages, clean):
        add("clean pages unchanged", out.text == page)
    planted_n, planted_s = 0, 0.0
    for seed in seeds:
        docs = plant(pages, language, seed=seed)
        t = time.process_time()
        outs = r.redact_many([d.text for d in docs])
        planted_s += time.process_time() - t
        planted_n += len(docs)
        for d, out in zip(docs, outs):
            add("pages kept", out.drop is None)
            for kind, value in d.values:
                add(f"gone: {kind}", value not in out.text)
                add("gone: all", value not in out.text)
            for value in d.lookalikes:
                add("look-alikes intact", value in out.text)
    tally["docs/s clean"] = [round(len(pages) / clean_s), 1]
    tally["docs/s planted"] = [round(planted_n / planted_s), 1]
    return {k: (v[0], v[1]) for k, v in tally.items()}


@pytest.mark.parametrize("language", ("es", "fr"))
def test_held_out_figures(language: str) -> None:
    """The issue's done-when: on held-out pages, planted values gone >= 99%, pages
    carrying them kept >= 97%, look-alikes intact >= 95%; and no false positive on >= 97%
    of the real pages as they are."""
    figures = _measure(language, range(2))
    print(f"\nheld-out {language} ({len(held_out_texts(language))} GIMP manual pages, 2 seeds)")
    for key, (ok, n) in sorted(figures.items()):
        print(f"  {key:24s} {ok}/{n}" + (f" = {ok / n:.1%}" if n > 1 else ""))

    def rate(key: str) -> float:
        ok, n = figures[key]
        return ok / n

    assert rate("gone: all") >= 0.99
    assert all(rate(k) >= 0.95 for k in figures if k.startswith("gone: "))
    assert rate("look-alikes intact") >= 0.95
    assert rate("clean pages unchanged") >= 0.97
    assert rate("pages kept") >= 0.97
    # A floor far below the measured rate (thousands a second): catches a detector that
    # went back to scanning every position with a costly pattern.
    assert figures["docs/s clean"][0] >= 300


def test_bare_national_numbers_need_a_phone_word() -> None:
    r = Redactor(PiiConfig(), "es")
    assert r.redact("Móvil: 612345678.").text == "Móvil: <PHONE>."
    assert r.redact("Llame al 612345678 hoy.").text == "Llame al <PHONE> hoy."
    assert r.find("El proceso 612345678 terminó.") == []
    assert r.redact("El proceso +34612345678 terminó.").text == "El proceso <PHONE> terminó."


def test_unknown_language_finds_international_numbers_only() -> None:
    r = Redactor(PiiConfig(), "xx")
    out = r.redact("Call +34 612 34 56 78 or 612 34 56 78.")
    assert out.text == "Call <PHONE> or 612 34 56 78."


def test_word_boundaries() -> None:
    """Values glued to other tokens are not values: a DNI inside a longer code, a card
    inside a longer digit run, an address's digits inside a version."""
    r = Redactor(PiiConfig(), "es")
    for text in ("REF12345678Z9", "x4539578763621486", "45395787636214860",
                 "v83.45.120.7", "1.83.45.120.7", "version 83.45.120.7"):
        assert r.find(text) == [], text
    assert r.redact("83.45.120.7").text == "<IP_ADDRESS>"
    # All four parts below 32: a section number, or a public resolver (nobody's address).
    assert r.find("8.8.8.8 and 1.1.1.1") == []


@pytest.mark.parametrize("text", [
    "defina Aptitude::UI::Keybindings::Menu::Foo como “tab,right”",  # the Spanish sample's aptitude manual
    "# htpasswd /etc/apache2/authfiles/htpasswd-private user",  # debian-handbook: a file, not a password
])
def test_a_word_that_only_holds_a_keyword_names_no_secret(text: str) -> None:
    assert Redactor(PiiConfig(), "es").redact(text).text == text
