"""scripts/published_tables.py: the check that explains each change to a published table accepts the
cleanings and nothing else, so that a changed number cannot pass as one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "published_tables.py"

OLD = """| Model    |       Dataset |   Seed |   steps |   Top-1 (%) |   Wall (s) |
|----------|---------------|--------|---------|-------------|------------|
| ViT-Mu/7 | Fashion-MNIST |      0 |   300.0 |       82.27 |          - |
| ViT-Mu/7 |  Digits (UCI) |      0 |     nan |       67.20 |          - |
"""
NEW = """| Dataset       |   steps |   Top-1 (%) |   Wall (s) |
|---------------|---------|-------------|------------|
| Fashion-MNIST |     300 |       82.27 |      895.3 |
| Digits (UCI)  |       - |       67.20 |        6.5 |

In every row: Model ViT-Mu/7; Seed 0.
"""


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("published_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cleanings_are_explained(check):
    why, unexplained = check.explain(OLD, NEW, [895.3442, 6.51])
    assert unexplained == []
    assert why == ["Wall (s) filled from each record's wall_seconds",
                   "integer setting printed as an integer (300.0 -> 300): steps",
                   "left out, the same in every row (said under the table): Model",
                   "left out, the same in every row (said under the table): Seed",
                   "nan printed as -: steps"]
    aligned = OLD.replace("|       Dataset |", "| Dataset       |").replace("| Fashion-MNIST |", "| Fashion-MNIST |")
    assert check.explain(OLD, OLD, []) == ([], [])
    assert check.explain(OLD, aligned.replace("|  Digits (UCI) |", "| Digits (UCI)  |"), [])[1] == []


@pytest.mark.parametrize("change, found", [
    (("82.27", "82.28"), "row 1, Top-1 (%): '82.27' -> '82.28'"),  # a number moved
    (("895.3", "895.4"), "row 1, Wall (s): '-' -> '895.4'"),  # not the record's wall seconds
    (("Model ViT-Mu/7; ", ""), "column 'Model' left out"),  # dropped and not said
])
def test_anything_else_is_not(check, change, found):
    _, unexplained = check.explain(OLD, NEW.replace(*change), [895.3442, 6.51])
    assert any(line.startswith(found) for line in unexplained), unexplained
