"""Which GGUF file a served model is, and who it is: the alias clients name in `model`,
the registry version and the weights hash that every rating records.

Its export's record also says which ratings of the chat page it was aligned on.

A model is given as an export directory (`yunque export --gguf`, data/exported_model, or
a registry version downloaded by the CLI) or a GGUF file. Its weights hash is the export's
(the sha256 of the checkpoint's weights that eval_report and the promotion name), else
the sha256 of the file served.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model.checkpoint.files import sha256_file
from model.core.gguf_types import ALL_GGUF_TYPES

EXPORT_RECORD = "yunque_export.json"  # model.export.hf.RECORD_FILE (that module imports torch)


class ModelError(ValueError):
    """A model that cannot be served; the message says what to give instead."""


@dataclass(frozen=True)
class ServedModel:
    alias: str  # what a request names in `model` (champion, candidate, v3, a file stem)
    gguf: Path
    version: str  # the registry version, or "-" for a model outside the registry
    weights_sha256: str
    source: str  # where it came from, for the log and /yunque/models
    n_ctx: int = 0  # the model's training context (0: unknown, llama.cpp's default)
    # the ratings it was aligned on ({"version", "ratings"}), from its export's lineage
    feedback: dict | None = None

    def describe(self) -> dict[str, object]:
        return {"id": self.alias, "version": self.version, "weights_sha256": self.weights_sha256,
                "file": self.gguf.name, "source": self.source, "context": self.n_ctx,
                "feedback": self.feedback or {"version": "none", "ratings": 0}}


def _record(directory: Path) -> dict:
    path = directory / EXPORT_RECORD
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from e


def _context(directory: Path) -> int:
    try:
        return int(json.loads((directory / "config.json").read_text()).get("max_position_embeddings", 0))
    except (FileNotFoundError, ValueError):
        return 0


def from_path(path: str | Path, quant: str, alias: str, version: str = "-") -> ServedModel:
    """The model at `path`: a GGUF file, or an export directory holding model-<quant>.gguf."""
    p = Path(path)
    if quant not in ALL_GGUF_TYPES:
        raise ModelError(f"--quant {quant!r}: choose one of {ALL_GGUF_TYPES}")
    if p.is_file():
        if p.suffix != ".gguf":
            raise ModelError(f"{p}: not a GGUF file (give an export directory or a .gguf)")
        gguf, directory = p, p.parent
    elif p.is_dir():
        gguf, directory = p / f"model-{quant}.gguf", p
        if not gguf.exists():
            have = sorted(x.name for x in p.glob("model-*.gguf"))
            raise ModelError(f"{p} has no {gguf.name}" + (f" (it has {', '.join(have)}: pass --quant)" if have else
                             " and no GGUF at all: export with `yunque export --gguf`, or set export.gguf"))
    else:
        raise ModelError(f"{p}: no such file or directory")
    # the lineage module brings the configuration tree: loaded when a model is, not when
    # `yunque serve`'s parser is built
    from stages.training.lineage import ratings_trained_on

    rec = _record(directory)
    weights = rec.get("weights_hash") or rec.get("source", {}).get("weights_sha256") or sha256_file(gguf)
    return ServedModel(alias=alias, gguf=gguf.resolve(), version=version, weights_sha256=weights,
                       source=str(p), n_ctx=_context(directory), feedback=ratings_trained_on(rec.get("lineage")))
