"""The documentation stays true: the site builds strict (no broken link or anchor, no page
left out of the nav), the README stays a short front door with the two commands, and no
page names a module that does not exist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAIN_COMMAND = ("python3.11 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e . "
                "&& .venv/bin/yunque run --preset tiny")
TEST_COMMAND = ("python3.11 -m venv .venv && CMAKE_ARGS=-DGGML_NATIVE=OFF .venv/bin/pip install -q -c constraints.txt "
                "-e '.[dev,bench]' && .venv/bin/python -m pytest -q")
# A module path inside a code span: `stages/config.py`, `model/post/config.py::tiny`.
MODULE = re.compile(r"(?<![\w/.-])((?:pipelines|model|stages|serving|resources|assets|orchestration|yunque|bench|tests)/[\w/]+\.py)\b")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# docs/architecture.md's table of module moves: old path (gone) | new path (exists)
MOVES = re.compile(r"<!-- moves -->(.*?)<!-- /moves -->", re.DOTALL)
MOVE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|$", re.MULTILINE)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_site_builds_strict(tmp_path):
    """Broken links, missing anchors and pages missing from the nav are warnings in
    mkdocs.yml's `validation`, and `--strict` makes every warning an error."""
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
         "-f", str(ROOT / "mkdocs.yml")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # mkdocs-material's notice about its successor
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_readme_is_a_short_front_door_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert MAIN_COMMAND in text
    assert TEST_COMMAND in text


def test_readme_links_to_docs_pages_that_exist():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)\s]*)?\)", text)
    assert links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def _nav_files(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [f for item in node for f in _nav_files(item)]
    if isinstance(node, dict):
        return [f for value in node.values() for f in _nav_files(value)]
    return []


def test_every_page_is_in_the_nav():
    # mkdocs.yml uses a python tag for the mermaid fence; a loader that ignores tags suffices here
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    nav = set(_nav_files(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in pages()}
    assert on_disk == nav


@pytest.mark.parametrize("doc", [README, *pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_module_paths_exist(doc):
    """Every module path a page names in a code span exists in the repository. The table of
    module moves names old paths on purpose: each must be gone, and its new path exist."""
    text = doc.read_text(encoding="utf-8")
    moved = MOVES.search(text)
    if moved:
        rows = MOVE_ROW.findall(moved.group(1))
        assert rows, "the moves table has no rows"
        assert [old for old, _ in rows if (ROOT / old).exists()] == [], "old paths still present"
        assert [new for _, new in rows if not (ROOT / new).is_file()] == [], "new paths missing"
        text = text[:moved.start()] + text[moved.end():]
    named = {m for span in CODE_SPAN.findall(text) for m in MODULE.findall(span)}
    assert [path for path in sorted(named) if not (ROOT / path).is_file()] == []


def test_the_readme_quotes_no_timings_or_test_counts():
    """Durations and test counts live in docs/benchmarks.md, which the measurements update;
    a figure copied into the README goes stale with the next run."""
    text = README.read_text(encoding="utf-8")
    figures = re.findall(r"\b\d[\d.,]*\s*(?:min(?:utes?)?|s|seconds?|h|hours?|tests?)\b(?![-\w])", text)
    assert figures == []


def test_architecture_lists_every_module():
    """docs/architecture.md's module tables name every module of the eight packages, each
    once, and nothing else: a new module gets its line, a moved one its new path."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    section = text[text.index("## Modules"):text.index("## Module moves")]
    listed = re.findall(r"^\| `([^`]+\.py)` \|", section, re.MULTILINE)
    packages = ("pipelines", "model", "stages", "serving", "resources", "assets", "orchestration", "yunque")
    modules = sorted(str(p.relative_to(ROOT)) for pkg in packages for p in (ROOT / pkg).rglob("*.py")
                     if p.name != "__main__.py")
    assert sorted(listed) == modules
    assert len(listed) == len(set(listed))


def test_every_flag_is_documented_and_every_documented_flag_exists():
    """Both ways: each flag of each `yunque` subcommand appears in the README or docs/, and
    each `--flag` written after `yunque <subcommand>` there is one that subcommand takes."""
    import argparse

    from yunque.cli.main import parser

    p = parser()
    top = {o for a in p._actions for o in a.option_strings if o.startswith("--")}

    def flags(sp: argparse.ArgumentParser) -> set[str]:
        out = set()
        for a in sp._actions:
            out |= {o for o in a.option_strings if o.startswith("--")}
            if isinstance(a, argparse._SubParsersAction):
                for nested in a.choices.values():
                    out |= flags(nested)
        return out - {"--help"}

    commands = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices
    taken = {name: flags(sp) for name, sp in commands.items()}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "".join(page.read_text() for page in pages)
    undocumented = {name: sorted(f for f in fl if f not in text) for name, fl in taken.items()}
    assert not {k: v for k, v in undocumented.items() if v}, undocumented
    written = re.compile(r"yunque(?:\s+--(?:home|s3-endpoint)(?:[ =]\S+)?)*\s+(" + "|".join(map(re.escape, taken))
                         + r")\b([^`\n]*)")
    unknown = []
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for m in written.finditer(line):
                used = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m.group(2)))
                unknown += [f"{page.name}:{number}: yunque {m.group(1)} {f}" for f in sorted(used - taken[m.group(1)] - top)]
    assert not unknown, unknown


def test_the_serve_transcript_is_the_recorded_one():
    """docs/serve.md's transcript is what bench.doc_transcripts recorded from the main
    command's model (docs/transcripts.json), never a hand-written exchange."""
    from bench.doc_transcripts import PAGE, RECORD, page_block, render

    record = json.loads(RECORD.read_text())
    assert len(record["model"]["weights_sha256"]) == 64 and len(record["replies"]) == len(record["questions"])
    assert page_block(PAGE.read_text()) == render(record)
