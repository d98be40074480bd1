"""The house's rules: the core (benchbench/) imports and names no built-in plugin (plugins/, package
benchbench_plugins); no plugin imports another; every module states its job in a docstring.

What the core must know of a model family, a dataset or a protocol comes through the specs the
plugins register. This walks every core module's imports and string constants (docstrings aside)
and fails on any that name a built-in: its module, a model, dataset or protocol id or alias, or a
model family. Ids come from the built-in plugins themselves, so a new built-in is covered too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "benchbench"
PLUGIN_PACKAGES = ("benchbench_plugins", "plugins")
# Words that are also a built-in's name but mean something else in the core: the torchvision and
# timm packages (dependencies whose versions records carry, whose checkpoint layouts the core reads),
# not the `torchvision` and `timm` model families.
NOT_PLUGIN_NAMES = {"torchvision", "timm"}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def imports_and_strings(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = _docstrings(tree)
    imports, strings = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            strings.append((node.lineno, node.value))
    return imports, strings


def forbidden_names(catalog) -> tuple[set[str], set[str]]:
    """(names that may not appear as a word of a string: model and dataset ids and aliases with a
    digit or a hyphen, which no English word has; names that may not be a whole string or a dotted
    or colon-separated part of one: every id, alias and family)."""
    specs = [*catalog.models, *catalog.datasets, *catalog.protocols, *catalog.executors]
    names = {n.lower() for s in specs for n in (s.id, *s.aliases)} | {m.family.lower() for m in catalog.models}
    names -= NOT_PLUGIN_NAMES
    distinctive = {n for n in names if re.search(r"[0-9/+-]", n) and not n.startswith("tv/")}
    return distinctive, names


def offences(text: str, distinctive: set[str], names: set[str]) -> list[str]:
    low = text.lower()
    found = []
    if low.strip() in names:
        found.append(low.strip())
    for token in re.findall(r"[a-z0-9_./:+-]+", low):
        token = token.strip(".:-")
        if token.startswith("aten::"):
            continue  # a torch operator's name (aten::linear), not a protocol
        if token in distinctive:
            found.append(token)
        parts = re.split(r"[.:]", token)
        if len(parts) > 1:
            found += [p for p in parts if p in names]
    if any(pkg in low for pkg in ("benchbench_plugins",)):
        found.append("benchbench_plugins")
    return found


def test_core_imports_no_plugin_module():
    bad = [f"{p.relative_to(CORE.parent)}: import {m}" for p in core_modules()
           for m in imports_and_strings(p)[0] if m.split(".")[0] in PLUGIN_PACKAGES]
    assert bad == []


def test_core_strings_name_no_builtin(catalog):
    distinctive, names = forbidden_names(catalog)
    assert {"vit-b16", "fashion-mnist", "r50x1+vit-b16"} <= distinctive and {"scratch", "bit", "hybrid"} <= names
    bad = [f"{p.relative_to(CORE.parent)}:{line}: {text!r} names {hit!r}"
           for p in core_modules() for line, text in imports_and_strings(p)[1]
           for hit in offences(text, distinctive, names)]
    assert bad == []


def test_the_check_catches_what_it_should():
    distinctive, names = {"vit-b16", "fashion-mnist"}, {"vit-b16", "fashion-mnist", "scratch", "vit", "measure"}
    assert offences("scratch", distinctive, names) == ["scratch"]
    assert offences("e.g. vit-b16 or 'ViT-B/16'", distinctive, names) == ["vit-b16"]
    assert offences("[sweep.scratch] train_subset", distinctive, names) == ["scratch"]
    assert offences("init = run:fashion-mnist", distinctive, names) == ["fashion-mnist"]
    assert offences("benchbench_plugins.models.vit", distinctive, names) == ["vit", "benchbench_plugins"]
    assert offences("measure a model's throughput", distinctive, names) == []
    assert offences("aten::linear", distinctive, names | {"linear"}) == []


PLUGINS = CORE.parent / "plugins"


def _is_plugin(path: Path) -> bool:
    return "@hookimpl" in path.read_text()


def test_no_plugin_imports_another():
    """A plugin file may import support modules of its kind (plugins/<kind>/*.py without hooks), never
    another plugin file: what two plugins share lives in a support module."""
    plugin_modules = {f"benchbench_plugins.{p.parent.name}.{p.stem}" for p in PLUGINS.glob("*/*.py") if _is_plugin(p)}
    assert len(plugin_modules) >= 17
    bad = [f"{p.relative_to(PLUGINS.parent)} imports {m}" for p in PLUGINS.rglob("*.py")
           for m in imports_and_strings(p)[0] if m in plugin_modules]
    assert bad == []


def test_every_module_states_its_job():
    missing = [str(p.relative_to(CORE.parent)) for p in (*core_modules(), *PLUGINS.rglob("*.py"))
               if not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert missing == []


# --- the core reads no protocol's setting by name -------------------------------------------------------
# A cell's resolution, precision, world and execution are read once, through the names its protocol's
# Roles give (benchbench.plan.cell); the core owns the execution settings' names (benchbench.execution).

SETTINGS_LIKE = re.compile(r"(^|\W)(s|settings|\w+\.settings|dict\([\w.]*settings\))$")


def setting_lookups(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, code) of each literal lookup of one of `names` into a settings mapping: `s["x"]`,
    `settings.get("x")`, `"x" in settings`, `record.settings["x"]`, and the frame column "setting.x"."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        target = key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            target, key = node.value, node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
              and node.args and isinstance(node.args[0], ast.Constant)):
            target, key = node.func.value, node.args[0].value
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
              and isinstance(node.ops[0], (ast.In, ast.NotIn))):
            target, key = node.comparators[0], node.left.value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("setting."):
            if node.value[len("setting."):] in names:
                found.append((node.lineno, node.value))
            continue
        if isinstance(key, str) and key in names and SETTINGS_LIKE.search(ast.unparse(target)):
            found.append((node.lineno, ast.unparse(node)))
    return found


# The one reading allowed, and why: records up to schema 2 kept their precision only as the built-in
# protocols' `precision` setting; reading an old record's format is the record's business, once.
HISTORY = {("benchbench/store/record.py", "settings.get('precision')")}


def test_the_core_reads_no_protocol_setting_by_name(catalog):
    from benchbench.execution import SETTING_NAMES

    names = {name for p in catalog.protocols for name in p.settings} - set(SETTING_NAMES)
    assert {"devices", "nodes", "sharding", "batch_size", "precision", "resolution"} <= names
    found = [(str(p.relative_to(CORE.parent)), line, code) for p in core_modules()
             for line, code in setting_lookups(p, names)]
    assert {(path, code) for path, _, code in found} >= HISTORY
    assert [f"{path}:{line}: {code}" for path, line, code in found if (path, code) not in HISTORY] == []


def test_the_setting_check_catches_what_it_should(tmp_path):
    path = tmp_path / "x.py"
    path.write_text('a = s["devices"]\nb = dict(cell.settings).get("nodes", 1)\nc = "batch_size" in s\n'
                    'd = r.settings.get("precision", "fp32")\ne = df["setting.lr"]\n'
                    'f = row["precision"]\ng = settings[name]\nh = env.get("devices")\n')
    names = {"devices", "nodes", "batch_size", "precision", "lr"}
    assert [line for line, _ in setting_lookups(path, names)] == [1, 2, 3, 4, 5]
