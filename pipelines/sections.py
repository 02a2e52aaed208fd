"""The kit every configuration section is built with, whatever layer it belongs to (the
data library's sections here in `pipelines.config`, the model's and post-training's in
`model`): the `section` decorator (pydantic dataclasses that refuse unknown fields and
validate assignments), field roles (recipe, path, runtime, continuation), and the
constrained number types."""

from __future__ import annotations

from dataclasses import field
from dataclasses import fields as dataclass_fields
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as _pydantic_dataclass

# Unknown fields are errors and assignments are validated (presets mutate sections).
SECTION_CONFIG = ConfigDict(extra="forbid", validate_assignment=True)


def section(cls):
    """A configuration section: a dataclass whose fields pydantic validates."""
    return _pydantic_dataclass(cls, config=SECTION_CONFIG)


# What a field is to a run, said where the field is declared (a field without a role is
# part of the recipe: it shapes what the run computes, and every run key hashes it):
PATH = "path"  # where the run reads and writes, filled in by the stage (differs between nodes and homes)
RUNTIME = "runtime"  # how fast, how safely, when to evaluate or checkpoint: not what the weights become
CONTINUATION = "continuation"  # where a continued run starts: its run key covers it through the start


def role(kind: str, default: Any = None, *, factory: Any = None) -> Any:
    """A field with a role: `x: int = role(RUNTIME, 0)`, `xs: list = role(PATH, factory=list)`."""
    if factory is not None:
        return field(default_factory=factory, metadata={"role": kind})
    return field(default=default, metadata={"role": kind})


def fields_with(cls: type, *kinds: str) -> tuple[str, ...]:
    """The names of `cls`'s fields with one of these roles."""
    return tuple(f.name for f in dataclass_fields(cls) if f.metadata.get("role") in kinds)


def recipe_fields(cls: type) -> tuple[str, ...]:
    """The fields without a role: what shapes the run."""
    return tuple(f.name for f in dataclass_fields(cls) if "role" not in f.metadata)


PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
OptFraction = Annotated[float, Field(ge=0, le=1)] | None
