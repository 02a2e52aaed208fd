"""The layer contract (docs/architecture.md): imports only point down.

    yunque (CLI) -> orchestration -> assets -> resources -> serving -> stages -> model -> pipelines

Inside a package its subpackages are floors too (`FLOORS`), and no two modules import
each other, directly or round a circle. Every import statement counts, including those
inside functions and those made for type annotations only: a lazy import that points up
is still a dependency that points up, and a type-only import that closes a circle still
ties two modules into one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["pipelines", "model", "stages", "serving", "resources", "assets", "orchestration", "yunque"]  # bottom to top
DAGSTER = {"dagster", "dagster_webserver", "dagster_graphql", "dagster_postgres", "dagster_k8s"}
# What each package may never import, beyond the layers above it.
FORBIDDEN_THIRD_PARTY = {
    "pipelines": {"torch", "dagster_pipes", *DAGSTER},
    "model": DAGSTER,
    "stages": {"dagster_pipes", *DAGSTER},
    "serving": {"dagster_pipes", *DAGSTER},
    "bench": {"tests"},
}
# The training programs report back through the small dagster_pipes package only.
PIPES_ALLOWED = {"model/launch/sinks.py"}
# The floors inside a package, bottom to top: a module may import its own floor and those
# below. A package's top-level modules (stages/config.py, assets/partitions.py, ...) are
# its ground floor, below every subpackage; a roof (ROOFS) is above them all.
FLOORS = {
    "model": ["launch", "core", "checkpoint", "pretrain", "infer", "export", "post"],
    "stages": ["store", "reports", "data", "training", "evaluation"],
    "assets": ["data", "feedback", "training", "evaluation", "operations"],
    "yunque": ["cli"],
    "pipelines": ["languages", "data", "tokens", "tasks", "feedback"],  # the tokenizer knows the pii placeholders
}
# Subpackages below their package's top-level modules: the language packs import nothing of
# `pipelines`, and the configuration sections validate language codes with them.
BASEMENTS = {"pipelines.languages"}


def module_imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted first-party module) for every import: `from a.b import c` names a.b.c
    when c is a module, else a.b."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, sub if _path(sub) else node.module))
    return [(line, m) for line, m in out if m.split(".")[0] in LAYERS]


def _path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


# Top-level modules above every floor of their package: the code location gathers them all;
# a run's configuration tree is built with the home's calibration proposals (stages.data).
ROOFS = {"assets.definitions", "stages.settings"}


def floor(module: str) -> int:
    """The floor of a module inside its package: 0 for the package's top-level modules, -1
    for a basement (BASEMENTS), above every floor for a roof (ROOFS)."""
    parts = module.split(".")
    floors = FLOORS.get(parts[0], [])
    if module in ROOFS:
        return len(floors) + 1
    if ".".join(parts[:2]) in BASEMENTS:
        return -1
    return floors.index(parts[1]) + 1 if len(parts) >= 2 and parts[1] in floors else 0


def floor_violations(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        me = _module(path)
        for line, other in module_imports(path):
            if other.split(".")[0] == package and floor(other) > floor(me):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {other}, a floor above")
    return found


def circles() -> list[list[str]]:
    """Every set of modules that import each other round a circle (Tarjan's strongly
    connected components of the import graph), type-only imports included."""
    graph = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            me = _module(path)
            graph[me] = {m for _, m in module_imports(path) if m != me and _path(m)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def levels(package: str) -> list[str]:
    """The longest chain of imports between the modules of `package`, every import counted
    (type-only and lazy ones too): how many modules a reader may have to open, one below
    the other, to follow one of them down."""
    graph = {}
    for path in (ROOT / package).rglob("*.py"):
        me = _module(path)
        graph[me] = {m for _, m in module_imports(path) if m != me and m.split(".")[0] == package and _path(m)}
    longest: dict[str, list[str]] = {}

    def chain(m: str) -> list[str]:
        if m not in longest:
            longest[m] = [m, *max((chain(o) for o in sorted(graph.get(m, ()))), key=len, default=[])]
        return longest[m]

    return max((chain(m) for m in sorted(graph)), key=len, default=[])


def private_imports() -> list[str]:
    """Imports of another module's private names (`from a import _b`): a name a module keeps
    to itself is free to change, so nobody else may lean on it."""
    found = []
    for package in (*LAYERS, "bench", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                        and node.module.split(".")[0] in (*LAYERS, "bench", "tests"):
                    found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{a.name}"
                              for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


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


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_floors_inside_a_package_point_down(package):
    assert floor_violations(package) == []


def test_no_import_circles():
    assert circles() == []


def test_stages_is_at_most_eight_levels_deep():
    """Stages lean on the store and on shared names, not on each other's insides (issue 43
    found 15 levels)."""
    chain = levels("stages")
    assert len(chain) <= 8, " -> ".join(chain)


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def test_every_subpackage_has_a_floor():
    """A new subpackage gets its place in FLOORS, so the floors keep covering every one."""
    for package in LAYERS:
        for sub in sorted(p.parent for p in (ROOT / package).glob("*/__init__.py")):
            assert sub.name in FLOORS.get(package, []), f"{sub.relative_to(ROOT)} has no floor in FLOORS"


def test_every_package_says_what_it_is_for():
    for package in LAYERS:
        for init in (ROOT / package).rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            assert doc and len(doc) > 20, f"{init.relative_to(ROOT)} has no docstring"


def test_the_checkers_find_a_circle_and_a_floor_above(tmp_path, monkeypatch):
    """The checkers themselves: a circle closed by a type-only import, and a core module
    that imports a post-training one."""
    for d in ("model", "model/core", "model/post"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "model/core/a.py").write_text("from model.post import b\n")
    (tmp_path / "model/post/b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from model.core.a import X\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert circles() == [["model.core.a", "model.post.b"]]
    assert floor_violations("model") == ["model/core/a.py:1 imports model.post.b, a floor above"]


def test_only_the_dagster_packages_import_dagster():
    """assets (the code location), resources (its resources) and orchestration (driving an
    instance from the CLI); nothing else."""
    for package in ("pipelines", "model", "stages", "serving", "bench", "yunque"):
        for path in (ROOT / package).rglob("*.py"):
            assert not {t for _, t in imports(path)} & DAGSTER, path


def test_the_contract_catches_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a lazy upward import inside a function is found."""
    pkg = tmp_path / "pipelines"
    pkg.mkdir()
    (pkg / "bad.py").write_text("def f():\n    from stages.store.outputs import DataStore\n    import torch\n")
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
