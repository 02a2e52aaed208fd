"""The local data files of lm-evaluation-harness tasks, read from their YAML (no harness
import): eval_contamination looks their items up in the training split, and a harness
result's cache key covers them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def task_data_files(include: Sequence[str | Path], tasks: Sequence[str]) -> dict[str, list[Path]]:
    """{task: its local data files} for the tasks among the include directories' YAML, for
    eval_contamination: the items a model will be judged on must not be in its training."""
    import yaml

    out: dict[str, list[Path]] = {}
    for d in include:
        for y in sorted(Path(d).glob("**/*.yaml")):
            try:
                spec = yaml.safe_load(y.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError:
                continue  # a YAML with the harness's own tags (!function): not a task we can read
            if not isinstance(spec, dict) or spec.get("task") not in tasks:
                continue
            files = (spec.get("dataset_kwargs") or {}).get("data_files") or {}
            values = files.values() if isinstance(files, dict) else [files]
            paths = [Path(v) for f in values for v in ([f] if isinstance(f, str) else f)]
            if relative := [str(p) for p in paths if not p.is_absolute()]:
                # the harness reads a relative path from the working directory, not the YAML's
                raise ValueError(f"{y}: task {spec['task']!r} has relative data_files {relative}; the harness "
                                 "would read them from the working directory: write absolute paths")
            out[spec["task"]] = paths
    return out
