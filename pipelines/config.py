"""One configuration tree for the data stages and pretraining, with presets as functions.

Every threshold a stage uses lives here so that a run is described completely by
`DataConfig` (and its hash is part of every stage's cache key). Defaults follow the
published rules (Gopher, C4, FineWeb as implemented by datatrove; FineWeb's 14x8 LSH).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import model.config as model_presets
import model.post_config as post_presets
from model.config import ModelConfig, TrainConfig
from model.post_config import PostTrainConfig


@dataclass
class ReaderConfig:
    # A single document larger than this is rejected (`too_large`) instead of being read
    # into memory and pushed through every filter.
    max_document_bytes: int = 10_000_000
    # Share of control characters (besides \t \n \r \f) above which a file is binary.
    max_control_char_ratio: float = 0.01


@dataclass
class CleanConfig:
    extractor: str = "resiliparse"  # "resiliparse" or "trafilatura"
    unicode_form: str = "NFC"
    fix_mojibake: bool = True  # ftfy.fix_text
    min_chars: int = 1  # shorter after extraction -> rejected as `empty_after_extraction`


@dataclass
class GopherQualityConfig:
    enabled: bool = True
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2


@dataclass
class GopherRepetitionConfig:
    enabled: bool = True
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: list[list[float]] = field(default_factory=lambda: [[2, 0.2], [3, 0.18], [4, 0.16]])
    dup_n_grams: list[list[float]] = field(
        default_factory=lambda: [[5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]]
    )


@dataclass
class C4Config:
    enabled: bool = True
    split_paragraph: bool = True
    remove_citations: bool = True
    # FineWeb runs C4 without the terminal-punctuation line rule; documentation has many
    # headings and list items without a full stop, so we follow FineWeb.
    filter_no_terminal_punct: bool = False
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True


@dataclass
class FineWebConfig:
    enabled: bool = True
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


@dataclass
class FilterConfig:
    language: str = "es"  # word rules (stop words) are adapted to this language
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    c4: C4Config = field(default_factory=C4Config)
    fineweb: FineWebConfig = field(default_factory=FineWebConfig)


@dataclass
class LangIdConfig:
    language: str = "es"
    threshold: float = 0.65
    max_chars: int = 1000  # fastText sees the first N characters, newlines folded
    batch_size: int = 512


@dataclass
class DedupConfig:
    ngram: int = 5  # word n-grams
    bands: int = 14
    rows: int = 8  # bands * rows = number of permutations
    seed: int = 1
    paragraph_dedup: bool = True
    min_paragraph_chars: int = 40  # shorter lines (headings, "Véase también") are not deduped
    # A document whose text drops below this after paragraph removal is rejected.
    min_chars_after_paragraph_dedup: int = 200
    # Asset check: kept pairs with estimated Jaccard at or above this fail the check.
    check_sample_size: int = 2000
    check_jaccard: float = 0.9

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


@dataclass
class TokenizerConfig:
    vocab_size: int = 32_000  # 48_000 suits technical domains with many identifiers
    # A merge must be seen at least this often; a vocabulary the corpus cannot fill at this
    # frequency is an error (see pipelines.tokenizer.VocabularyTooLarge), not a tiny tokenizer.
    min_frequency: int = 2
    # Training text: a deterministic sample of at most this many bytes of training-split
    # documents, streamed from the deduplicated shards.
    sample_bytes: int = 1_000_000_000
    # Train/validation split by document, from a hash of doc_id: the same documents are
    # held out of tokenizer training, of the token shards' train arrays and of training.
    val_fraction: float = 0.05
    split_seed: int = 0
    # model_max_length written for transformers (the largest preset context; the export
    # writes the model's own)
    max_length: int = 2048
    # Compression check: tokens per word above this for the target language is a warning.
    max_tokens_per_word: float = 1.4
    check_documents: int = 500  # held-out documents the round-trip check encodes
    # Retrain even though a tokenizer with this configuration exists. Not part of the
    # cache key: a new shard is encoded with the existing tokenizer unless asked.
    retrain: bool = False


SAMPLE_PROMPTS = (
    "La instalación de Debian",
    "El sistema de archivos",
    "Para configurar la red,",
    "En la hoja de cálculo, pulse",
    "Había una vez",
)


@dataclass
class EvalConfig:
    """eval_report: what every checkpoint is measured on (the same for every stage)."""
    val_batches: int = 50  # batches of train.batch_size x train.seq_len validation tokens (at most)
    prompts: tuple[str, ...] = SAMPLE_PROMPTS  # generation samples, plain continuations
    sample_tokens: int = 64
    temperature: float = 0.8
    top_k: int = 50
    top_p: float = 0.95
    seed: int = 0
    math_set: str = "es_add2"  # held-out problems only (pipelines/math_tasks.py)
    math_problems: int = 200
    math_file: str = ""  # a GSM8K-format jsonl, evaluated as well when given
    math_max_new_tokens: int = 96  # a column-by-column worked addition is about 70 tokens
    batch_size: int = 32  # prompts decoded at once
    repetition_threshold: float = 0.5  # repeated 4-gram rate of a sample that raises the alarm
    overfit_window: int = 3  # evaluation points compared by the overfitting alarm


@dataclass
class ExportConfig:
    dtype: str = "float32"  # of model.safetensors
    gguf: tuple[str, ...] = ("f16", "q8_0", "q4_0")  # a model-<type>.gguf for each; () for none


@dataclass
class DataConfig:
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # pretraining: the model's shape (vocab_size is replaced by the tokenizer's) and the recipe
    model: ModelConfig = field(default_factory=model_presets.gpt2_125m)
    train: TrainConfig = field(default_factory=model_presets.train_default)
    post: PostTrainConfig = field(default_factory=PostTrainConfig)  # sft, reward, dpo, ppo, grpo
    eval: EvalConfig = field(default_factory=EvalConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def section_hash(self, *sections: str, fields: tuple[str, ...] | None = None) -> str:
        """Hash of the named sections only (or of `fields` of the one named section), so
        that changing a dedup knob does not invalidate the cached reader output, nor a
        check threshold the tokenizer."""
        d = self.to_dict()
        if fields is not None:
            (section,) = sections
            d = {section: {f: d[section][f] for f in fields}}
        blob = json.dumps({s: d[s] for s in sections}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default() -> DataConfig:
    return DataConfig()


def tiny() -> DataConfig:
    # The data rules do not change with model size; the tokenizer does: a few thousand
    # tokens suit a CPU-sized model and a small corpus.
    cfg = DataConfig(model=model_presets.tiny(), train=model_presets.train_tiny(), post=post_presets.tiny())
    cfg.tokenizer.vocab_size = 4096
    cfg.eval.math_problems = 100
    return cfg


PRESETS = {"default": default, "tiny": tiny}


def preset(name: str, overrides: dict[str, Any] | None = None) -> DataConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[name]()
    overrides = dict(overrides or {})
    if isinstance(overrides.get("model"), str):  # {"model": "small"}: another model preset
        cfg.model = model_presets.preset(overrides.pop("model"))
    if overrides:
        cfg = apply_overrides(cfg, overrides)
    if cfg.filters.language != cfg.langid.language:
        # Stop words of one language with language ID for another would reject everything.
        raise ValueError(f"filters.language ({cfg.filters.language!r}) and langid.language "
                         f"({cfg.langid.language!r}) must name the same language; set both")
    t = cfg.tokenizer
    if not 0 < t.val_fraction < 1:
        raise ValueError(f"tokenizer.val_fraction must be in (0, 1), got {t.val_fraction}")
    if t.vocab_size < 256 + 16:
        raise ValueError(f"tokenizer.vocab_size must be at least 272 (256 bytes + special tokens), got {t.vocab_size}")
    cfg.train.betas = tuple(cfg.train.betas)  # JSON overrides give a list
    cfg.eval.prompts = tuple(cfg.eval.prompts)
    cfg.export.gguf = tuple(cfg.export.gguf)
    _check_train(cfg.train, cfg.model)
    for stage in ("sft", "reward", "dpo", "ppo", "grpo"):
        getattr(cfg.post, stage).betas = tuple(getattr(cfg.post, stage).betas)
        post_presets.check(stage, getattr(cfg.post, stage))
    return cfg


def _check_train(t: TrainConfig, m: ModelConfig) -> None:
    choices = {"dtype": ("fp32", "bf16"), "schedule": ("cosine", "wsd"), "optimizer": ("adamw", "muon"),
               "on_nonfinite": ("stop", "skip")}
    for name, allowed in choices.items():
        if getattr(t, name) not in allowed:
            raise ValueError(f"train.{name} must be one of {allowed}, got {getattr(t, name)!r}")
    if t.seq_len > m.context:
        raise ValueError(f"train.seq_len ({t.seq_len}) exceeds the model's context ({m.context})")
    if m.dim % m.n_heads or m.n_heads % m.kv_heads:
        raise ValueError(f"model.dim ({m.dim}) must divide into n_heads ({m.n_heads}), and n_heads "
                         f"into n_kv_heads ({m.kv_heads})")
    if min(t.steps, t.batch_size, t.seq_len, t.grad_accum, t.eval_every, t.checkpoint_every) < 1:
        raise ValueError("train.steps, batch_size, seq_len, grad_accum, eval_every and checkpoint_every "
                         "must be at least 1")


def apply_overrides(cfg: Any, overrides: dict[str, Any]) -> Any:
    """Nested override: {"langid": {"threshold": 0.5}} or {"langid.threshold": 0.5}."""
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if not hasattr(cfg, head):
            raise ValueError(f"unknown config field {key!r} on {type(cfg).__name__}")
        current = getattr(cfg, head)
        if rest:
            value = {rest: value}
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            setattr(cfg, head, apply_overrides(current, value))
        else:
            setattr(cfg, head, value)
    return cfg
