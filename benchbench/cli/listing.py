"""What the loaded plugins registered, as rows of plain data (`benchbench list`), cached.

Loading the plugins imports torch, torchvision and every plugin module (seconds); the rows they
produce change only when that code or the installed packages change. So the rows are kept in
`<cache>/listing.json` (`$BENCHBENCH_CACHE`, default `~/.cache/benchbench`) under a fingerprint of:
the Python and its site-packages directories' entries (every installed distribution's name and
version, every `.pth` file's modification time), the entry points of group "benchbench" and
whether third-party ones load, the modification time and size of every `.py` file of the packages
that provide them and of benchbench itself (so an editable install's edits count), and each
`--plugin` file with the `.py` files beside it. A listing that reported a plugin failure is not
cached. A fingerprint that does not match loads the plugins anew.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from benchbench.meters.cache import cache_dir, write_quietly
from benchbench.plugins import ENTRY_POINTS_ENV, GROUP, Catalog
from benchbench.registry import parametric_form

CACHE_FILE = "listing.json"
KEEP = 8  # fingerprints remembered (several checkouts or environments share one cache)


def rows(kind: str, cat: Catalog) -> list[dict[str, Any]]:
    """One JSON-ready dict per spec of `kind` (models | datasets | protocols | executors | reporters)."""
    registry = cat.registry(kind)
    if kind == "models":
        from benchbench.meters.params import cached_params_at_default  # torch

        # a parametric family (timm/<name>) is no one model: it has no parameter count
        params = cached_params_at_default([s for s in registry if parametric_form(s) is None],
                                          cache_dir() / "params.json")
    out = []
    for spec in registry:
        row = {"id": spec.id, "name": spec.name, "plugin": registry.plugin_of[spec.id],
               "aliases": list(spec.aliases)}
        if parametric_form(spec) is not None:
            row["parametric"] = parametric_form(spec)  # how its ids are written
        if kind == "models":
            row.update(family=spec.family, default_resolution=spec.default_resolution, params=params.get(spec.id),
                       marker=spec.marker, color=spec.color)
        elif kind == "datasets":
            row.update(num_classes=spec.num_classes, image_size=spec.image_size, in_chans=spec.in_chans,
                       splits=list(spec.splits))
        elif kind == "reporters":
            row.update(extra=spec.extra)
        elif kind == "executors":
            row.update(default=spec.default, extra=spec.extra,
                       options={k: {"default": s.default, "help": s.help} for k, s in spec.options.items()})
        else:
            row["settings"] = {k: {"default": s.default, "help": s.help} for k, s in spec.settings.items()}
        row["description"] = spec.description
        out.append(row)
    return json.loads(json.dumps(out))  # what a cached copy reads back as: lists, not tuples


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:missing"
    return f"{path}:{st.st_mtime_ns}:{st.st_size}"


def _package_files(module: str) -> list[str]:
    """Stamps of the .py files of `module`'s top-level package (or of the module's own file)."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])  # finds, imports nothing
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return [f"{module}:not found"]
    if spec.submodule_search_locations:
        return [_stat(p) for d in spec.submodule_search_locations for p in sorted(Path(d).rglob("*.py"))]
    return [_stat(Path(spec.origin))] if spec.origin else [f"{module}:no file"]


def _site_entries() -> list[str]:
    out = []
    for d in sys.path:
        if not d.endswith(("site-packages", "dist-packages")) or not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".dist-info", ".egg-info")):
                out.append(name)
            elif name.endswith(".pth"):
                out.append(_stat(Path(d) / name))
    return out


def fingerprint(files: Iterable[str | Path] = ()) -> str:
    parts = [sys.version, sys.prefix, f"{ENTRY_POINTS_ENV}={os.environ.get(ENTRY_POINTS_ENV, '')}",
             *_site_entries(), *_package_files("benchbench")]
    modules = set()
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = ep.dist
        parts.append(f"{ep.name}={ep.value}@{dist.name if dist else ''}=={dist.version if dist else ''}")
        modules.add(ep.module.split(".")[0])
    for module in sorted(modules):
        parts += _package_files(module)
    for f in files:
        path = Path(f)
        parts.append(f"--plugin {f}")
        parts.append(_stat(path))
        if path.parent.is_dir():
            parts += [_stat(p) for p in sorted(path.resolve().parent.glob("*.py"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def cached_rows(kind: str, files: Iterable[str | Path], load: Callable[[], Catalog]) -> list[dict[str, Any]]:
    """`rows(kind, load())`, or the rows stored under the current fingerprint (no plugin loads)."""
    files = list(files)
    key = fingerprint(files)
    path = cache_dir() / CACHE_FILE
    try:
        stored = json.loads(path.read_text())
        if not isinstance(stored, dict):
            stored = {}
    except (OSError, ValueError):
        stored = {}
    entry = stored.get(key)
    if isinstance(entry, dict) and isinstance(entry.get(kind), list):
        return entry[kind]
    cat = load()
    out = rows(kind, cat)
    if cat.failures:
        return out  # the warning must show again next time
    entry = entry if isinstance(entry, dict) else {}
    stored.pop(key, None)
    stored[key] = {**entry, kind: out}  # newest last
    stored = dict(list(stored.items())[-KEEP:])
    write_quietly(path, json.dumps(stored))
    return out
