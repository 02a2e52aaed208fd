import pytest

from pipelines.config import preset


def test_dotted_and_nested_overrides():
    cfg = preset("tiny", {"langid.threshold": 0.5, "filters": {"c4": {"enabled": False}}})
    assert cfg.langid.threshold == 0.5
    assert cfg.filters.c4.enabled is False
    assert cfg.dedup.num_perm == 112  # 14 bands x 8 rows


def test_unknown_override_and_preset_are_errors():
    with pytest.raises(ValueError, match="unknown config field 'nope' on LangIdConfig"):
        preset("tiny", {"langid.nope": 1})
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")


def test_section_hash_only_changes_with_its_section():
    a, b = preset("tiny"), preset("tiny", {"dedup.bands": 20})
    assert a.section_hash("reader", "clean") == b.section_hash("reader", "clean")
    assert a.section_hash("dedup") != b.section_hash("dedup")


def test_languages_must_agree():
    with pytest.raises(ValueError, match="must name the same language"):
        preset("tiny", {"langid.language": "en"})
    cfg = preset("tiny", {"langid.language": "en", "filters.language": "en"})
    assert cfg.langid.language == cfg.filters.language == "en"
