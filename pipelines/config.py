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

from dataclasses import field
from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as _pydantic_dataclass

# Unknown fields are errors and assignments are validated (presets mutate sections).
SECTION_CONFIG = ConfigDict(extra="forbid", validate_assignment=True)


def section(cls):
    """A configuration section: a dataclass whose fields pydantic validates."""
    return _pydantic_dataclass(cls, config=SECTION_CONFIG)


PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
OptFraction = Annotated[float, Field(ge=0, le=1)] | None


@section
class ReaderConfig:
    # A single document larger than this is rejected (`too_large`) instead of being read
    # into memory and pushed through every filter.
    max_document_bytes: PosInt = 10_000_000
    # Share of control characters (besides \t \n \r \f) above which a file is binary.
    max_control_char_ratio: Fraction = 0.01


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


@section
class GopherRepetitionConfig:
    enabled: bool = True
    dup_line_frac: OptFraction = 0.3
    dup_para_frac: OptFraction = 0.3
    dup_line_char_frac: OptFraction = 0.2
    dup_para_char_frac: OptFraction = 0.2
    # [n, maximum fraction] pairs
    top_n_grams: list[tuple[PosInt, Fraction]] = field(default_factory=lambda: [(2, 0.2), (3, 0.18), (4, 0.16)])
    dup_n_grams: list[tuple[PosInt, Fraction]] = field(
        default_factory=lambda: [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]
    )


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


@section
class FilterConfig:
    language: str = "es"  # word rules (stop words) are adapted to this language
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    c4: C4Config = field(default_factory=C4Config)
    fineweb: FineWebConfig = field(default_factory=FineWebConfig)


@section
class LangIdConfig:
    language: str = "es"
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

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


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
