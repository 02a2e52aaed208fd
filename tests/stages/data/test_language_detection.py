"""A corpus in another language than the configured one is detected and said, never silently
emptied: a new home takes the corpus' language, a shard in another language gets a WARN,
a run that keeps nothing fails with one line, and codes normalise or are refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

from stages.data.corpus_language import detect_corpus_language
from tests.support.cli import yunque
from tests.support.factory import spanish_text

FRENCH = (
    "Le serveur attribue une adresse à chaque machine du réseau local au démarrage.",
    "Pour modifier la configuration, ouvrez le fichier dans un éditeur de texte.",
    "Les utilisateurs peuvent enregistrer leurs documents dans le dossier personnel.",
    "Cette commande affiche la liste des paquets installés sur le système.",
    "Il faut redémarrer le service pour que les changements soient pris en compte.",
    "La fenêtre principale présente les outils les plus utilisés par les graphistes.",
    "Vous pouvez choisir la langue de l'interface dans les préférences du programme.",
    "Le journal indique si la sauvegarde s'est terminée sans erreur.",
)


def french_text(rng: random.Random, paragraphs: int = 4) -> str:
    return "\n\n".join(" ".join(rng.sample(FRENCH, 5)) for _ in range(paragraphs))


def write_shard(root: Path, name: str, text, n: int = 6, seed: int = 1) -> None:
    rng = random.Random(seed)
    (root / name).mkdir(parents=True)
    for i in range(n):
        (root / name / f"page{i}.txt").write_text(text(rng), encoding="utf-8")


def test_a_french_corpus_is_detected_as_french(tmp_path: Path) -> None:
    write_shard(tmp_path, "guide", french_text)
    write_shard(tmp_path, "aide", french_text, seed=2)
    found = detect_corpus_language(str(tmp_path))
    assert (found.code, found.label, found.documents, found.share) == ("fr", "fr", 12, 1.0)
    assert found.line() == "language: fr (French), detected in 100% of 12 documents sampled from 2 shards"


def test_a_mixed_corpus_picks_the_majority_and_names_the_other_shards(tmp_path: Path) -> None:
    write_shard(tmp_path, "manuales", spanish_text)
    write_shard(tmp_path, "foro", spanish_text, seed=3)
    write_shard(tmp_path, "guide", french_text)
    found = detect_corpus_language(str(tmp_path))
    assert found.code == "es" and found.per_shard["guide"] == ("fr", 1.0)
    assert found.line().endswith("; shards mostly in another language: guide (fr 100%)")


def test_an_unsupported_majority_is_named(tmp_path: Path) -> None:
    text = "Dies ist ein Satz auf Deutsch, und er beschreibt die Konfiguration des Servers. "
    (tmp_path / "doku").mkdir()
    (tmp_path / "doku" / "a.txt").write_text(text * 5, encoding="utf-8")
    found = detect_corpus_language(str(tmp_path))
    assert found.code == "de"  # German has a data pack: detected, supported
    (tmp_path / "doku" / "a.txt").write_text("これは日本語の文章です。サーバーの設定を説明します。" * 5, encoding="utf-8")
    found = detect_corpus_language(str(tmp_path))
    assert found.code is None and found.label == "ja"
    assert "which Yunque has no language pack for; supported: ca, de, en, es, fr" in found.line()


def test_a_new_home_takes_the_corpus_language_and_says_so(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_shard(corpus, "guide", french_text)
    home = tmp_path / "home"
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--select", "key:raw_documents")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "language: fr (French), detected in 100% of 6 documents sampled from 1 shards"
    assert json.loads((home / "yunque.json").read_text())["overrides"] == {"language": "fr"}
    # the home keeps it: a later run without --language says nothing of languages
    p = yunque("--home", str(home), "run", "--corpus", str(corpus), "--select", "key:raw_documents")
    assert p.returncode == 0 and "language" not in p.stdout.splitlines()[0], p.stdout


def test_language_codes_are_normalised_or_refused_in_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_shard(corpus, "guide", french_text)
    p = yunque("--home", str(tmp_path / "a"), "run", "--corpus", str(corpus), "--language", "fr_FR",
               "--select", "key:raw_documents")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "language 'fr_FR' is read as 'fr' (French)"
    p = yunque("--home", str(tmp_path / "b"), "run", "--corpus", str(corpus), "--language", "frr")
    assert p.returncode == 2
    assert p.stderr.strip() == ("yunque run: --language: unknown language 'frr' (did you mean 'fr'?); "
                                "supported: ca, de, en, es, fr, it, pt (ISO 639-1 codes)")
    assert not (tmp_path / "b" / "yunque.json").exists()


def test_a_corpus_in_another_language_warns_per_shard_and_fails_with_one_line(tmp_path: Path) -> None:
    """Configured for Spanish, a French corpus keeps nothing: each shard's check says what
    it found, and the run fails naming French and the fix; it never exits 0."""
    corpus = tmp_path / "corpus"
    write_shard(corpus, "guide", french_text)
    write_shard(corpus, "aide", french_text, seed=2)
    p = yunque("--home", str(tmp_path / "home"), "run", "--corpus", str(corpus), "--language", "es",
               "--select", "*dedup_index")
    assert p.returncode != 0, p.stdout
    out = p.stdout + p.stderr
    cause = ("no document kept: all 12 documents of 2 shards that reached the quality filters were dropped, "
             "12 as langid:other_language: fastText says fr for 12, the run keeps es; rerun with --language fr")
    assert cause in out, out
    for shard in ("guide", "aide"):
        assert (f"filtered_documents[{shard}]:in_corpus_language: WARN shard {shard}: 6 of 6 documents (100%) "
                f"dropped as langid:other_language; fastText says fr for 6 of them; the run keeps es") in out, out


def test_the_language_keys_of_the_overrides_are_saved_as_codes() -> None:
    """The home keeps "fr", whatever the user wrote: the launchpad's choice is the codes."""
    from resources.overrides import ConfigOverrides
    from stages.config import nest
    from yunque.cli.language import with_language

    out, lines = with_language({"language": "FR", "train.steps": 3}, None, {})
    assert out == {"language": "fr", "train.steps": 3} and lines == ["language 'FR' is read as 'fr' (French)"]
    out, lines = with_language({"filters.language": "fr_FR", "langid": {"language": "fr", "threshold": 0.5}}, None, {})
    assert out == {"filters.language": "fr", "langid": {"language": "fr", "threshold": 0.5}}
    assert lines == ["filters.language 'fr_FR' is read as 'fr' (French)"]
    assert ConfigOverrides.model_validate(nest(out)).filters.language.value == "fr"
    # the form is kept: a home whose overrides are dotted stays dotted, run after run
    saved = {"train.steps": 3, "language": "es"}
    assert with_language({"train.steps": 3}, None, saved) == (saved, [])
    # no language given: the home's is kept
    assert with_language({}, None, {"language": "fr"}) == ({"language": "fr"}, [])
