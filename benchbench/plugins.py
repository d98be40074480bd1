"""Plugin discovery: entry points (benchbench's own built-ins and third-party packages) and local
files, all through one path.

The built-in plugins are the entry points of the benchbench distribution itself (group "benchbench"
in its pyproject.toml); this module names none of them. A plugin that fails to import (or whose
register hook raises) is reported and skipped unless `strict` is set; the others keep working.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterable

import pluggy

from benchbench import hookspecs
from benchbench.errors import BenchError
from benchbench.hookspecs import KINDS, PREFIX
from benchbench.registry import Registry
from benchbench.specs import ModelContractError, ModelSpec, built_class, check_contract

GROUP = "benchbench"
DISTRIBUTION = "benchbench"  # the distribution whose own entry points are the built-in plugins
# Set to "0" to skip third-party entry points (tests do, so installed plugins cannot leak in); the
# built-ins load regardless.
ENTRY_POINTS_ENV = "BENCHBENCH_LOAD_ENTRY_POINTS"


class PluginError(BenchError):
    pass


@dataclass(frozen=True)
class PluginFailure:
    plugin: str
    error: str
    detail: str  # traceback, for --verbose and records

    def __str__(self) -> str:
        return f"plugin {self.plugin!r} failed and was skipped: {self.error}"


@dataclass
class Catalog:
    """What the loaded plugins registered, one registry per kind of spec (hookspecs.KINDS: `models`,
    `datasets`, ... as attributes), plus the plugins that failed."""

    pm: pluggy.PluginManager
    registries: dict[str, Registry] = field(default_factory=lambda: {kind: Registry(kind[:-1]) for kind in KINDS})
    failures: list[PluginFailure] = field(default_factory=list)

    def __getattr__(self, kind: str) -> Registry:
        registries = self.__dict__.get("registries", {})
        if kind in registries:
            return registries[kind]
        raise AttributeError(f"{type(self).__name__!r} has no attribute {kind!r}")

    def local_files(self) -> tuple[str, ...]:
        """The local plugin files loaded (--plugin), in order."""
        return tuple(name[len("file:"):] for name, _ in self.pm.list_name_plugin() if name.startswith("file:"))

    def registry(self, kind: str) -> Registry:
        return self.registries[kind]


def make_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    return pm


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise PluginError(f"--plugin {path}: no such file")
    name = f"benchbench_local_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"--plugin {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _register_plugin(
    pm: pluggy.PluginManager, name: str, load: Callable[[], object], failures: list[PluginFailure], strict: bool
) -> None:
    """Import one plugin and register it under `name`; the one path for every plugin source."""
    try:
        plugin = load()
        if pm.is_registered(plugin) or pm.get_plugin(name) is not None:
            return
        pm.register(plugin, name=name)
    except Exception as exc:  # noqa: BLE001 - any import error must be isolated
        if strict:
            raise PluginError(f"plugin {name!r} failed to load: {_error_text(exc)}") from exc
        failures.append(PluginFailure(name, _error_text(exc), traceback.format_exc()))


def entry_points_enabled() -> bool:
    return os.environ.get(ENTRY_POINTS_ENV, "1") != "0"


def _is_builtin(ep: importlib.metadata.EntryPoint) -> bool:
    return ep.dist is not None and ep.dist.name == DISTRIBUTION


def builtin_entry_points(
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> list[importlib.metadata.EntryPoint]:
    """The built-in plugins among `entry_points` (default: the installed ones of group "benchbench"),
    in the order the installed metadata lists them (setuptools sorts them by name)."""
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=GROUP)
    found = [ep for ep in entry_points if _is_builtin(ep)]
    if not found:
        raise PluginError(f"benchbench's built-in plugins are not registered (no entry points of {DISTRIBUTION!r} "
                          f"in group {GROUP!r}); install benchbench, e.g. `pip install -e .` in its checkout")
    return found


def load_plugins(
    pm: pluggy.PluginManager,
    *,
    builtins: bool = True,
    files: Iterable[str | Path] = (),
    entry_points: bool | None = None,
    strict: bool = False,
) -> list[PluginFailure]:
    """Register the built-ins, third-party entry points (group "benchbench"; `entry_points` None:
    unless BENCHBENCH_LOAD_ENTRY_POINTS=0) and local files, each through `_register_plugin`."""
    failures: list[PluginFailure] = []
    installed = list(importlib.metadata.entry_points(group=GROUP))  # one scan of the installed metadata
    if builtins:
        for ep in builtin_entry_points(installed):
            _register_plugin(pm, ep.name, ep.load, failures, strict)
    if entry_points_enabled() if entry_points is None else entry_points:
        for ep in installed:
            if not _is_builtin(ep):
                _register_plugin(pm, ep.name, ep.load, failures, strict)
    for path in files:
        path = Path(path)
        _register_plugin(pm, f"file:{path}", lambda p=path: _import_file(p), failures, strict)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"{exc} (hooks are: {', '.join(PREFIX + kind for kind in KINDS)})") from exc
    return failures


def collect(pm: pluggy.PluginManager, failures: list[PluginFailure] | None = None, strict: bool = False) -> Catalog:
    """Call every register_* hook, filling fresh registries; each spec remembers its plugin."""
    catalog = Catalog(pm=pm, failures=list(failures or ()))
    for kind, registry in catalog.registries.items():
        hook = getattr(pm.hook, PREFIX + kind)
        # One implementation at a time, so each spec knows its plugin and a plugin raising here
        # is isolated like one failing to import.
        for impl in hook.get_hookimpls():  # registration order
            specs: list = []
            try:
                impl.function(register=specs.append)
            except Exception as exc:  # noqa: BLE001
                if strict:
                    raise PluginError(
                        f"plugin {impl.plugin_name!r} raised in {hook.name}: {_error_text(exc)}"
                    ) from exc
                catalog.failures.append(PluginFailure(impl.plugin_name, _error_text(exc), traceback.format_exc()))
                continue  # nothing of a failing plugin is half-registered
            wrong = [spec for spec in specs if not isinstance(spec, KINDS[kind])]
            problem = (f"plugin {impl.plugin_name!r} registered a {type(wrong[0]).__name__} through {hook.name}, "
                       f"which takes {KINDS[kind].__name__}s") if wrong else _contract_problem(specs, impl.plugin_name)
            if problem:
                if strict:
                    raise PluginError(problem)
                catalog.failures.append(PluginFailure(impl.plugin_name, problem, ""))
                continue
            for spec in specs:
                registry.add(spec, impl.plugin_name)
    return catalog


def _contract_problem(specs: list, plugin: str) -> str | None:
    """Why a model spec of `specs` breaks the model contract, where that shows without building it: its
    `build` is a class (or a functools.partial of one) that lacks a method. A builder function is checked
    when a cell first builds its model (benchbench.run.worker)."""
    for spec in specs:
        cls = built_class(spec.build) if isinstance(spec, ModelSpec) else None
        if cls is not None:
            try:
                check_contract(spec, cls, plugin)
            except ModelContractError as exc:
                return str(exc)
    return None


def plugin_package(plugin: str) -> dict[str, str | None]:
    """The package (distribution) a loaded plugin came from, and its version, for records."""
    if plugin.startswith("file:"):
        return {"package": plugin, "version": None}
    for ep in importlib.metadata.entry_points(group=GROUP):
        if ep.name == plugin and ep.dist is not None:
            return {"package": ep.dist.name, "version": ep.dist.version}
    return {"package": plugin, "version": None}


def load_catalog(
    files: Iterable[str | Path] = (), *, strict: bool = False, entry_points: bool | None = None
) -> Catalog:
    """A fresh plugin manager with every plugin loaded and every registry filled."""
    pm = make_manager()
    failures = load_plugins(pm, files=files, strict=strict, entry_points=entry_points)
    return collect(pm, failures, strict=strict)


@dataclass(frozen=True)
class Plugins:
    """The plugins a run loaded beyond the installed ones (--plugin files), and whether a plugin that
    fails is an error: the one route by which a worker loads the driver's catalog."""

    files: tuple[str, ...] = ()
    strict: bool = False

    def load(self) -> Catalog:
        return load_catalog(self.files, strict=self.strict)
