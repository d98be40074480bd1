"""The core's layers, as pyproject's import-linter contracts say them, hold (`lint-imports`, TYPE_CHECKING
imports included), and the contract covers the whole core: every subpackage and every module beside
them is in the layers, at most 15 modules sit beside the subpackages, and each subpackage's
`__init__` says what it holds and what it may import."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORE = REPO / "benchbench"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is not installed: scripts/setup.sh installs the test extras (import-linter)")
    return subprocess.run([exe, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)})


def contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_core_keeps_its_layers():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and " 0 broken" in result.stdout


def test_the_layers_name_every_part_of_the_core():
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    parts = {f"benchbench.{p.name}" for p in CORE.iterdir() if (p / "__init__.py").is_file()}
    parts |= {f"benchbench.{p.stem}" for p in CORE.glob("*.py") if p.name != "__init__.py"}
    assert named == parts


def test_a_small_flat_core_and_subpackages_that_say_what_they_may_import():
    modules = [p for p in CORE.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 15, sorted(p.name for p in modules)
    for package in (p for p in CORE.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        assert "\nImports: " in doc, f"benchbench/{package.name}/__init__.py: say what it may import (Imports: ...)"


def test_the_check_finds_an_import_that_runs_up_a_layer(tmp_path):
    """The same tool on a two-layer package whose lower layer imports the upper one, under TYPE_CHECKING."""
    pkg = tmp_path / "house"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("from house import low\n")
    (pkg / "low" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from house import high\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = house\n\n[importlinter:contract:layers]\nname = Layers\n"
        "type = layers\nlayers =\n    house.high\n    house.low\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout
    assert "house.low -> house.high" in result.stdout
