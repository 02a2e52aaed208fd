"""The layer contract (docs/architecture.md): imports only point down.

    yunque (CLI) -> assets -> resources -> stages -> model -> pipelines

Every import statement counts, including those inside functions: a lazy import that
points up is still a dependency that points up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["pipelines", "model", "stages", "resources", "assets", "yunque"]  # bottom to top
DAGSTER = {"dagster", "dagster_webserver", "dagster_graphql", "dagster_postgres", "dagster_k8s"}
# What each package may never import, beyond the layers above it.
FORBIDDEN_THIRD_PARTY = {
    "pipelines": {"torch", "dagster_pipes", *DAGSTER},
    "model": DAGSTER,
    "stages": {"dagster_pipes", *DAGSTER},
    "bench": {"tests"},
}
# The training programs report back through the small dagster_pipes package only.
PIPES_ALLOWED = {"model/sinks.py"}


def imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def violations(package: str) -> list[str]:
    above = set(LAYERS[LAYERS.index(package) + 1:]) if package in LAYERS else set()
    banned = above | FORBIDDEN_THIRD_PARTY.get(package, set())
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for line, top in imports(path):
            if top == "dagster_pipes" and rel in PIPES_ALLOWED:
                continue
            if top in banned:
                found.append(f"{rel}:{line} imports {top}")
    return found


@pytest.mark.parametrize("package", [*LAYERS, "bench"])
def test_imports_point_down(package):
    assert violations(package) == []


def test_only_assets_and_resources_import_dagster():
    for package in ("pipelines", "model", "stages", "bench", "yunque"):
        for path in (ROOT / package).rglob("*.py"):
            assert not {t for _, t in imports(path)} & DAGSTER, path


def test_the_contract_catches_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a lazy upward import inside a function is found."""
    pkg = tmp_path / "pipelines"
    pkg.mkdir()
    (pkg / "bad.py").write_text("def f():\n    from stages.store import DataStore\n    import torch\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations("pipelines") == ["pipelines/bad.py:2 imports stages", "pipelines/bad.py:3 imports torch"]


def test_the_library_imports_without_torch_or_dagster():
    """Importing every module of `pipelines` loads neither torch nor dagster (a fresh
    interpreter, so nothing else has imported them first)."""
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for p in (ROOT / "pipelines").rglob("*.py"))
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'dagster', 'model', 'stages') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
