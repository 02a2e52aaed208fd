"""The language packs (pipelines/languages/): every pack found on disk is complete and
valid, codes normalise or are refused in one line, and the data rules follow the language
(stop words with elided forms, C4's policy phrases, FineWeb-2's thresholds)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipelines import languages
from pipelines.config import FilterConfig, filter_profile
from pipelines.data.filters import QualityFilters, TextView
from pipelines.data.filters.c4 import C4
from pipelines.data.filters.integrity import Integrity
from stages.config import ConfigError, preset

PACKS = languages.codes()


def test_the_languages_the_issue_names_are_supported() -> None:
    assert {"es", "en", "fr", "de", "pt", "it", "ca"} <= set(PACKS)


@pytest.mark.parametrize("code", PACKS)
def test_every_pack_is_complete(code: str) -> None:
    """A new folder needs no code: this test reads it like any other."""
    pack = languages.get(code)
    assert pack.code == code and len(code) == 2 and code.islower()
    assert pack.name and pack.native
    assert all(len(a) == 3 for a in pack.aliases)
    assert len(pack.stop_words) >= 8 and all(w == w.lower() for w in pack.stop_words)
    assert pack.gopher_stop_words and pack.gopher_stop_words <= pack.stop_words | pack.gopher_stop_words
    assert all(p == p.lower() for p in pack.policy_phrases)
    assert pack.filter_source
    web = filter_profile("web", code)  # every threshold the pack sets is a valid field, taken as given
    for section, values in pack.filters.items():
        got = json.loads(json.dumps(dataclasses.asdict(getattr(web, section))))
        assert {k: got[k] for k in values} == values, section
    filter_profile("docs", code)  # and the profile's changes apply over them


def test_no_two_packs_answer_to_one_code() -> None:
    names = [n for c in PACKS for n in (c, *languages.get(c).aliases)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("given", ["fr_FR", "fr-FR", "FR", "fra", "fre", "French", "français"])
def test_spellings_of_a_language_normalise_with_one_line(given: str) -> None:
    code, note = languages.resolve(given)
    assert code == "fr"
    assert note == f"language {given!r} is read as 'fr' (French)"


def test_a_code_as_written_says_nothing() -> None:
    assert languages.resolve("fr") == ("fr", None)


@pytest.mark.parametrize(("given", "hint"), [("xx", ""), ("frr", " (did you mean 'fr'?)"),
                                             ("Frnch", " (did you mean 'fr'?)")])
def test_an_unknown_code_is_refused_with_the_supported_ones(given: str, hint: str) -> None:
    with pytest.raises(languages.UnknownLanguage) as e:
        languages.resolve(given)
    assert str(e.value) == (f"unknown language {given!r}{hint}; supported: {', '.join(PACKS)} (ISO 639-1 codes)")


def test_config_refuses_an_unknown_language_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^config key 'language': unknown language 'xx'; supported: "):
        preset("tiny", {"language": "xx"})


def test_french_thresholds_are_fineweb2s_published_ones() -> None:
    """configs/fra_Latn.yml of huggingface/fineweb-2 at d331bee8 (the paper version)."""
    web = filter_profile("web", "fr")
    assert web.fineweb.line_punct_thr == 0.1 and web.fineweb.new_line_ratio == 0.185
    assert web.gopher_quality.min_avg_word_length == 2 and web.gopher_quality.max_avg_word_length == 11
    assert web.gopher_quality.max_non_alpha_words_ratio == 0.812
    assert web.gopher_repetition.dup_line_frac == 0.264
    assert list(web.gopher_repetition.top_n_grams) == [(2, 0.161), (3, 0.149), (4, 0.134)]
    # English keeps FineWeb's own (the sections' defaults)
    assert filter_profile("web", "en") == FilterConfig(profile="web", language="en")
    assert filter_profile("web", "en").fineweb.line_punct_thr == 0.12


def test_elided_forms_count_as_stop_words() -> None:
    """"l'homme", "d’un", "qu'il": the integrity rule's whitespace words count them, as the
    Gopher rule's tokenizer counts their "l", "d", "qu"."""
    fr = languages.get("fr")
    rule = Integrity(filter_profile("docs", "fr").integrity, fr)
    text = "L'homme d’un pays qu'il aime s'arrête jusqu'à l'aube"
    share = rule.measure(TextView(text))["integrity:stop_word_share"]
    assert share == pytest.approx(6 / 8)  # all but "pays" and "aime"
    assert languages.elided("d’un", fr.elisions) and not languages.elided("aujourd'hui", fr.elisions)
    # Spanish has no elisions: an apostrophe changes nothing
    es = languages.get("es")
    assert not languages.elided("l'homme", es.elisions)


FRENCH_COOKIES = "\n".join([  # noqa: FLY002 (one sentence a line)
    "Ce site utilise des cookies pour améliorer votre expérience de navigation.",
    "En poursuivant, vous acceptez l’utilisation des cookies et nos conditions d'utilisation.",
    "Consultez notre politique de confidentialité pour en savoir plus sur vos données.",
    "Vous pouvez refuser les cookies dans les réglages de votre navigateur.",
])


def test_policy_phrases_of_the_language_remove_their_lines() -> None:
    cfg = filter_profile("docs", "fr").c4
    c4 = C4(cfg, languages.get("fr").policy_phrases)
    res = c4.filter(TextView(FRENCH_COOKIES))
    assert not res.keep and res.reason == "c4:too_few_sentences"
    # the English-only list (C4 as published) keeps every line of it
    assert C4(cfg).filter(TextView(FRENCH_COOKIES + "\nUne phrase.\nDeux phrases.")).keep


PROSE = "\n".join([  # noqa: FLY002 (one sentence a line)
    "Le serveur DHCP attribue une adresse à chaque machine du réseau local.",
    "Voici un extrait de sa configuration, pour le sous-réseau de la maison :",
    "subnet 192.168.0.0 netmask 255.255.255.0 { range 192.168.0.10 192.168.0.50; }",
    "Les machines reçoivent alors une adresse dans cette plage au démarrage.",
    "Il faut ensuite redémarrer le service pour que la configuration soit lue.",
    "Le journal du système indique si le démarrage s'est bien passé.",
])


def test_one_brace_drops_its_line_in_docs_and_the_page_on_the_web() -> None:
    docs = QualityFilters(filter_profile("docs", "fr")).c4
    res = docs.filter(TextView(PROSE))
    assert res.keep and "{" not in res.text and "DHCP" in res.text
    web = C4(filter_profile("web", "fr").c4)
    assert web.filter(TextView(PROSE)).reason == "c4:curly_bracket"


def test_a_pack_without_the_model_half_says_what_is_missing() -> None:
    missing = languages.get("de").missing()
    assert missing == [] or all(isinstance(m, str) and m for m in missing)
