"""The one configuration tree: every section of the data library (`pipelines.config`) and
of the model (`model.core.config`, `model.post.config`), with presets as functions.

A run is a preset plus overrides. `preset()` checks every override (unknown keys with
the closest names, a section replaced by a scalar, wrong types and out-of-range values,
then the rules that tie sections together) before any work starts, and fails with one
line that names the key. It resolves what a stage would otherwise look up later (the
filter profile, an adopted calibration's thresholds), so the tree it returns is the
run's whole configuration (docs/architecture.md#the-configuration). Overrides are
JSON-shaped: `{"langid.threshold": 0.5}`, `{"langid": {"threshold": 0.5}}`;
`{"model": "small"}` (or `"model.preset"` beside other `model.*` keys) takes another
model preset.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError, field_validator

import model.core.config as model_presets
import model.post.config as post_presets
from model.core.config import CostConfig, EvalConfig, ExportConfig, ModelConfig, TrainConfig
from model.core.schedule import schedule_problem
from model.post.config import PostTrainConfig
from pipelines import languages
from pipelines.config import (
    CleanConfig,
    DecontaminationConfig,
    DedupConfig,
    FilterConfig,
    LangIdConfig,
    LanguageCode,
    PiiConfig,
    ReaderConfig,
    TokenizerConfig,
    apply_profile,
)
from pipelines.sections import Fraction, NonNegFloat, PosInt, section
from stages.preset_names import DEFAULT_PRESET, RUN_PRESETS


class ConfigError(ValueError):
    """A preset or override that cannot describe a run; the message is one line."""


@section
class PromotionConfig:
    """promoted_model and its no_regression check (stages/evaluation/promotion.py): where the champion
    lives in MLflow's model registry, and how much worse than it an export may be."""

    # MLflow refuses '/' and ':' in a registered model's name
    registered_model: Annotated[str, Field(min_length=1, pattern=r"^[^/:]+$")] = "yunque"
    # MLflow's alias rules: word characters and '-'; 'latest' and 'v<N>' are reserved
    alias: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[\w-]+$")] = "champion"
    # relative: val_bpb may rise to champion * (1 + this); the same validation windows
    # give the same figure for the same weights, so any rise is the model's
    max_bpb_increase: NonNegFloat = 0.01
    # absolute: math_accuracy may fall to champion - this (100 problems: one is 0.01)
    max_accuracy_drop: Fraction = 0.02
    # absolute: each harness task's acc (eval.harness) may be at most this below the
    # champion's; None: the harness results are reported, not a criterion
    harness_max_drop: Fraction | None = None

    @field_validator("alias")
    @classmethod
    def _not_reserved(cls, alias: str) -> str:
        if alias.lower() == "latest" or (alias[:1] in "vV" and alias[1:].isdigit()):
            raise ValueError("'latest' and 'v<number>' are MLflow's own aliases")
        return alias


@section
class FeedbackConfig:
    """The ratings of the chat page (`yunque serve`) and the feedback_sensor that carries
    them to a new alignment run (docs/use.md). How much each rating weighs in training is
    post.<stage>.human_weight."""

    # the sensor (off by default, like the training schedule) starts align_on_feedback once
    # this many ratings arrived since human_preferences was last materialized
    min_new_ratings: PosInt = 10


@section
class YunqueConfig:
    # The corpus' language (ISO 639-1, a pack in pipelines/languages/): language ID, stop words
    # and thresholds, the post-training data and the evaluation sets follow it.
    # filters.language and langid.language follow it unless set themselves (advanced).
    language: LanguageCode = "es"
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)  # personal data, handled before dedup
    langid: LangIdConfig = field(default_factory=LangIdConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    decontamination: DecontaminationConfig = field(default_factory=DecontaminationConfig)  # eval_contamination
    # pretraining: the model's shape (vocab_size is replaced by the tokenizer's) and the recipe
    model: ModelConfig = field(default_factory=model_presets.gpt2_125m)
    train: TrainConfig = field(default_factory=model_presets.train_default)
    post: PostTrainConfig = field(default_factory=PostTrainConfig)  # sft, reward, dpo, ppo, grpo
    eval: EvalConfig = field(default_factory=EvalConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    cost: CostConfig = field(default_factory=CostConfig)  # the estimate before a training run
    promotion: PromotionConfig = field(default_factory=PromotionConfig)  # the registry's champion
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)  # the chat page's ratings

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def section_hash(self, *sections: str, fields: tuple[str, ...] | None = None) -> str:
        """Hash of the named sections only (or of `fields` of the one named section), so
        that changing a dedup knob does not invalidate the cached reader output, nor a
        check threshold the tokenizer."""
        d = self.to_dict()
        if fields is not None:
            (name,) = sections
            d = {name: {f: d[name][f] for f in fields}}
        blob = json.dumps({s: d[s] for s in sections}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default() -> YunqueConfig:
    return YunqueConfig()


def tiny() -> YunqueConfig:
    # The data rules do not change with model size; the tokenizer does: a few thousand
    # tokens suit a CPU-sized model and a small corpus.
    cfg = YunqueConfig(model=model_presets.tiny(), train=model_presets.train_tiny(), post=post_presets.tiny())
    cfg.tokenizer.vocab_size = 4096
    cfg.eval.math_problems = 100
    return cfg


def smoke() -> YunqueConfig:
    """The whole graph in minutes on any small corpus: every asset materializes, with the
    tiny model, a 512-token vocabulary and a few steps of each training (a check of the
    plumbing on your own data before a real run; the model it trains is not meant to be
    good). docs/recipes.md says when to use it."""
    cfg = tiny()
    cfg.tokenizer.vocab_size = 512  # a small corpus supports a few hundred merges, not thousands
    # a small corpus has few documents: a fifth of them, not 5%, fills a validation batch
    cfg.tokenizer.val_fraction = 0.2
    cfg.train = dataclasses.replace(cfg.train, steps=20, batch_size=4, seq_len=64, warmup=2, eval_every=10,
                                    eval_batches=2, checkpoint_every=10, compile=False, warmup_probe_steps=1,
                                    early_stop_patience=0, downstream_every=10)
    cfg.post = post_presets.smoke()
    cfg.eval = dataclasses.replace(cfg.eval, math_problems=8, sample_tokens=16, math_max_new_tokens=16, val_batches=2)
    # its own registered model: a smoke run's export never becomes the real model's champion
    cfg.promotion = dataclasses.replace(cfg.promotion, registered_model="yunque-smoke")
    return cfg


PRESETS: dict[str, Callable[[], YunqueConfig]] = {"default": default, "tiny": tiny, "smoke": smoke}
if tuple(PRESETS) != RUN_PRESETS or DEFAULT_PRESET not in PRESETS:  # the names the CLI knows without this module
    raise RuntimeError(f"stages.preset_names {RUN_PRESETS} / {DEFAULT_PRESET!r} do not match PRESETS {tuple(PRESETS)}")
_ADAPTER = TypeAdapter(YunqueConfig)


# An adopted calibration's thresholds (reason -> value) by proposal id: the proposals live
# in a home, which this module does not know (stages.settings.tree passes the home's).
Proposals = Callable[[str], Mapping[str, float | None]]


def preset(name: str, overrides: Mapping[str, Any] | None = None, proposals: Proposals | None = None) -> YunqueConfig:
    """The validated tree of preset `name` with `overrides` applied, or a ConfigError.
    `filters.calibration` needs `proposals`: its thresholds are written into `filters`
    here, once, and the id stays beside them to say where they came from."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}{_did_you_mean(name, PRESETS)}; "
                          f"choose one of {sorted(PRESETS)}")
    base = PRESETS[name]()
    nested = nest(overrides or {})
    # {"model": "small"} or {"model.preset": "small", "model.n_layers": 6}: another model
    # preset, then its fields
    model = nested.get("model")
    model_preset = model.pop("preset", None) if isinstance(model, dict) else None
    if model_preset is not None:
        if model_preset not in model_presets.PRESETS:
            raise ConfigError(f"unknown model preset {model_preset!r}"
                              f"{_did_you_mean(str(model_preset), model_presets.PRESETS)}; "
                              f"choose one of {sorted(model_presets.PRESETS)}")
        base.model = model_presets.preset(model_preset)
    _one_language(nested)
    # a filter profile first (its thresholds), then the explicit filter fields over it
    if isinstance(nested.get("filters"), dict):
        base.filters = apply_profile(base.filters, nested["filters"])
    tree = base.to_dict()
    _merge(tree, nested, ())
    _finite(tree, ())
    try:
        # JSON mode, strict: "100" is not an int and "0.9" not a float, while a JSON array
        # is a tuple and an int a float, as a user writing JSON expects.
        cfg = _ADAPTER.validate_json(json.dumps(tree), strict=True)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None
    check(cfg)
    if cfg.filters.calibration is not None:
        cfg.filters = _calibrated(cfg.filters, proposals)
    return cfg


def _calibrated(filters: FilterConfig, proposals: Proposals | None) -> FilterConfig:
    from pipelines.data.calibrate import apply_thresholds

    if proposals is None:
        raise ConfigError(f"config key 'filters.calibration': proposal {filters.calibration!r} lives in a home; "
                          "build the configuration with the home that holds it (--home)")
    try:
        return apply_thresholds(filters, proposals(filters.calibration))
    except (OSError, ValueError, KeyError, TypeError) as e:  # no such proposal, an unreadable or a damaged one
        said = str(e)
        raise ConfigError(said if said.startswith("filters.calibration") else
                          f"filters.calibration {filters.calibration!r}: {said}") from None


def _finite(tree: Any, path: tuple[str, ...]) -> None:
    """No infinite or NaN number anywhere: JSON readers other than Python's reject them
    (yunque.json would hold `Infinity`), and no setting means one."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            _finite(v, (*path, str(k)))
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            _finite(v, (*path, str(i)))
    elif isinstance(tree, float) and not math.isfinite(tree):
        why = " (a JSON number too large for a double reads as infinity)" if math.isinf(tree) else ""
        raise ConfigError(f"config key {'.'.join(path)!r}: {tree} is not a finite number{why}")


def _one_language(nested: dict[str, Any]) -> None:
    """`language` sets filters.language and langid.language where they are not given
    themselves; given alone, either of those sets `language` (how a language was chosen
    before there was one key). Every code is normalised here ("fr_FR" -> "fr"), so the
    profile and the merged tree see the supported code, and an unknown one fails naming
    the supported codes."""
    given = {"language": nested.get("language")}
    for name in ("filters", "langid"):
        section = nested.get(name)
        if isinstance(section, dict) and "language" in section:
            given[f"{name}.language"] = section["language"]
    codes = {}
    for key, value in given.items():
        if value is None and key == "language":
            continue
        try:
            codes[key] = languages.normalise(value) if isinstance(value, str) else value
        except languages.UnknownLanguage as e:
            raise ConfigError(f"config key {key!r}: {e}") from None
    if not codes:
        return
    top = codes.get("language", codes.get("filters.language", codes.get("langid.language")))
    nested["language"] = top
    for name in ("filters", "langid"):
        section = nested.setdefault(name, {})
        if isinstance(section, dict):
            section["language"] = codes.get(f"{name}.language", top)


def nest(overrides: Mapping[str, Any], _top: bool = True) -> dict[str, Any]:
    """{"a.b": 1, "a": {"c": 2}} -> {"a": {"b": 1, "c": 2}}; {"model": "small"} ->
    {"model": {"preset": "small"}}. A key given both a value and fields is an error,
    whatever the order."""
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"overrides must be a JSON object of keys to values, got {type(overrides).__name__}")
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        parts = str(key).split(".")
        if _top and parts == ["model"] and isinstance(value, str):
            parts = ["model", "preset"]
        node = out
        for i, p in enumerate(parts[:-1]):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"config key {'.'.join(parts[:i + 1])!r} is given both a value and fields")
        last = parts[-1]
        if isinstance(value, Mapping):
            value = nest(value, _top=False)
            if _top and parts == ["model"] and isinstance(value.get("preset"), dict):
                raise ConfigError("config key 'model.preset' is a preset name, not a section")
        if last in node and isinstance(node[last], dict) != isinstance(value, dict):
            raise ConfigError(f"config key {'.'.join(parts)!r} is given both a value and fields")
        if isinstance(value, dict) and isinstance(node.get(last), dict):
            _deep_update(node[last], value)
        else:
            node[last] = value
    return out


def _deep_update(target: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _deep_update(target[k], v)
        else:
            target[k] = v


# Maps whose keys are the user's names, not fields: an override may add an entry
# (`{"cost.devices.mi300x": {"peak_tflops": 1307, ...}}`), and an entry's fields merge.
OPEN_MAPS = {("cost", "devices"), ("reader", "turn_roles")}


def _merge(tree: dict[str, Any], overrides: dict[str, Any], path: tuple[str, ...]) -> None:
    for key, value in overrides.items():
        dotted = ".".join((*path, key))
        if path in OPEN_MAPS and key not in tree:
            tree[key] = value  # a new entry, validated with the tree
            continue
        if key not in tree:
            raise ConfigError(f"unknown config key {dotted!r}{_did_you_mean(key, tree, path)}")
        if isinstance(tree[key], dict):
            if not isinstance(value, dict):
                example = next(iter(tree[key]))
                raise ConfigError(f"config key {dotted!r} is a section, not a value: set its fields, "
                                  f"e.g. {dotted + '.' + example!r}")
            _merge(tree[key], value, (*path, key))
        elif isinstance(value, dict):
            raise ConfigError(f"config key {dotted!r} is a value, not a section: "
                              f"it has no field {next(iter(value))!r}")
        else:
            tree[key] = value


def _did_you_mean(name: str, choices: Mapping[str, Any], path: tuple[str, ...] = ()) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(".".join((*path, c))) for c in close) + "?)"


def _one_line(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_branch(p))
        parts.append(f"config key {loc!r}: {err['msg']} (got {err['input']!r})")
    return "; ".join(parts)


def _is_union_branch(p: Any) -> bool:
    # pydantic names the branch of `int | None` it tried ("int", "constrained-int"...)
    return isinstance(p, str) and ("-" in p or p in {"int", "float", "str", "bool", "none", "tuple", "list"})


def check(cfg: YunqueConfig) -> None:
    """The rules that tie sections together (each section validates its own fields)."""
    if cfg.filters.language != cfg.langid.language:
        # Stop words of one language with language ID for another would reject everything.
        raise ConfigError(f"filters.language ({cfg.filters.language!r}) and langid.language "
                          f"({cfg.langid.language!r}) must name the same language; set `language` alone")
    if cfg.pii.person != "keep":
        from pipelines.data.pii.names import NoNameModel
        from pipelines.data.pii.names import check as name_model

        try:  # at the edge, not inside the first shard's filter step
            name_model(cfg.language)
        except NoNameModel as e:
            raise ConfigError(str(e)) from None
    t, m = cfg.train, cfg.model
    if problem := schedule_problem("train", lr=t.lr, min_lr=t.min_lr, warmup=t.warmup, steps=t.steps):
        raise ConfigError(problem)
    if t.seq_len > m.context:
        raise ConfigError(f"train.seq_len ({t.seq_len}) exceeds model.context ({m.context})")
    if m.dim % m.n_heads or m.n_heads % m.kv_heads:
        raise ConfigError(f"model.dim ({m.dim}) must divide into model.n_heads ({m.n_heads}), and "
                          f"model.n_heads into model.n_kv_heads ({m.kv_heads})")
    if t.on_nonfinite == "rollback" and t.fsdp:
        # the rollback reloads full weights into the model, which FSDP has sharded
        raise ConfigError("train.on_nonfinite 'rollback' does not work with train.fsdp yet; use 'skip' or DDP")
    for stage in post_presets.STAGE_TYPES:
        try:
            post_presets.check(stage, getattr(cfg.post, stage))
        except ValueError as e:
            raise ConfigError(str(e)) from None


def schema() -> dict[str, Any]:
    """JSON schema of the tree (`yunque config schema`)."""
    return _ADAPTER.json_schema()
