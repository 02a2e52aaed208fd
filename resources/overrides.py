"""Typed overrides for the Dagster launchpad, generated from the one configuration tree.

`ConfigOverrides` mirrors `stages.config.YunqueConfig` section by section with every
field optional: a field left empty keeps the preset's value. The launchpad then shows
each section and field with its type, offers the allowed values of a choice (an enum),
and rejects an unknown key or a wrong type before a run starts; `stages.config.preset`
checks ranges and the rules between sections when the run reads its settings.

Dagster's config system takes primitives, lists, enums and nested `Config` classes, so
tuples become lists and `Literal` choices become enums.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Annotated, Any, Literal, Union

import dagster as dg
from pydantic import Field, create_model

from model.core.config import PRESETS as MODEL_PRESETS
from pipelines import languages
from pipelines.config import LanguageCode
from stages.config import PRESETS, YunqueConfig

PresetName = enum.Enum("PresetName", {p: p for p in PRESETS}, type=str)
ModelPresetName = enum.Enum("ModelPresetName", {p: p for p in MODEL_PRESETS}, type=str)


def _choices(name: str, values: tuple[str, ...]) -> type[enum.Enum]:
    return enum.Enum(name, {v: v for v in values}, type=str)


def _field_type(hint: Any, name: str) -> Any:
    """The Dagster-config type of one leaf's type hint."""
    if hint == LanguageCode:  # the supported codes, a choice in the launchpad
        return _choices(name, languages.codes())
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _field_type(args[0], name)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _field_type(rest[0], name)
    if origin is Literal:
        return _choices(name, args)
    if dataclasses.is_dataclass(hint):  # the items of a list (train.mixture's sources)
        return _item(hint, name)
    if origin is dict:  # a map of the user's names (cost.devices): each entry given whole
        return dict[str, _field_type(args[1], name)]
    if origin in (tuple, list):
        items = {_field_type(a, name) for a in args if a is not Ellipsis}
        if len(items) == 1:
            return list[items.pop()]
        return list  # mixed items ([n, fraction]): checked by stages.config.preset
    return hint


def _item(cls: type, name: str) -> type[dg.Config]:
    """A list item's fields, each required (an item is given whole, not overridden)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: (_field_type(hints[f.name], f"{name}_{f.name}"), ...) for f in dataclasses.fields(cls)}
    return create_model(f"{name.title().replace('_', '')}Item", __base__=dg.Config, **fields)


def _section(cls: type, defaults: Any, name: str) -> type[dg.Config]:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    if cls is type(YunqueConfig().model):
        fields["preset"] = (ModelPresetName | None, Field(
            default=None, description="another model shape, applied before the fields below"))
    for f in dataclasses.fields(cls):
        hint, default = hints[f.name], getattr(defaults, f.name)
        if dataclasses.is_dataclass(default):
            sub = _section(type(default), default, f"{name}_{f.name}")
            fields[f.name] = (sub | None, Field(default=None))
        else:
            fields[f.name] = (_field_type(hint, f"{name}_{f.name}") | None,
                              Field(default=None, description=f"default preset: {default!r}"))
    return create_model(f"{name.title().replace('_', '')}Overrides", __base__=dg.Config, **fields)


ConfigOverrides = _section(YunqueConfig, YunqueConfig(), "config")


def as_dict(overrides: dg.Config | None) -> dict[str, Any]:
    """The fields set in `overrides`, nested as `stages.config.preset` takes them."""
    if overrides is None:
        return {}
    return _prune(overrides.model_dump(mode="json", exclude_none=True))


def _prune(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _prune(v)
            if not v:
                continue
        out[k] = v
    return out
