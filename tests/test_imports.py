"""No import cycle in benchbench/ or plugins/ (package benchbench_plugins), counting imports inside
functions and under `if TYPE_CHECKING:`: no circle, even on paper (the plugin contract names the run
layer's values through Protocols of its own, benchbench.specs). The layers between the core's
subpackages are import-linter's contracts (tests/test_layers.py)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"benchbench": REPO / "benchbench", "benchbench_plugins": REPO / "plugins"}


def modules() -> dict[str, Path]:
    out = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in its file (a `from pkg import sub` of a
    submodule is that submodule; of any other name, the package itself)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            found.update(s for s in subs if s in known)
            if not all(s in known for s in subs):
                found.add(base)
    out = set()
    for module in found:
        while module and module not in known:
            module = module.rpartition(".")[0]
        if module and module != name:
            out.add(module)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    known = modules()
    graph = {name: imports(name, path, set(known)) for name, path in known.items()}
    assert len(graph) > 80 and any(graph.values())
    assert cycles(graph) == []


def test_the_check_finds_a_cycle_hidden_in_a_function_or_on_paper(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import d\n")
    (tmp_path / "d.py").write_text("import c\n")
    known = {"a", "b", "c", "d"}
    graph = {m: imports(m, tmp_path / f"{m}.py", known) for m in known}
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}
    assert cycles(graph) == [["a", "b"], ["c", "d"]]


def test_no_test_module_runs_another():
    """What several test modules share is a fixture in tests/conftest.py: no test module imports or
    executes another's code (importlib's file loaders, an import of a test_ module)."""
    tests = Path(__file__).resolve().parent
    names = {p.stem for p in tests.glob("test_*.py")}
    bad = []
    for path in sorted(tests.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [f"{path.name}: import {a.name}" for a in node.names if a.name.split(".")[-1] in names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in names:
                bad.append(f"{path.name}: from {node.module} import ...")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py") \
                    and node.value[:-3] in names:
                bad.append(f"{path.name}: names {node.value}")
    assert bad == []
