"""No function in benchbench/ takes more than 8 parameters (self and cls aside, *args and **kwargs
counted): a longer list is a value object waiting to be named (issue 28's run context, Inputs, Timing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "benchbench"
MOST = 8


def parameters(source: str) -> list[tuple[int, int, str]]:
    """(count, line, name) of every function in `source`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
            if names and names[0] in ("self", "cls"):
                count -= 1
            out.append((count, node.lineno, node.name))
    return out


def test_no_function_takes_more_than_eight_parameters():
    long = [f"{path.relative_to(CORE.parent)}:{line} {name} ({count})" for path in sorted(CORE.rglob("*.py"))
            for count, line, name in parameters(path.read_text()) if count > MOST]
    assert long == [], "more than 8 parameters: " + ", ".join(long)


@pytest.mark.parametrize("source, count", [
    ("def f(a, b, *, c=1, **kw): pass", 4),
    ("class C:\n    def m(self, a, *rest): pass", 2),
    ("def f(a, /, b, *args, c, **kw): pass", 5),
])
def test_the_count(source, count):
    assert parameters(source)[0][0] == count
