"""The hooks a benchbench plugin may implement. Each receives a `register` callback.

Every hook here is collect-all: the implementations of all plugins are called, none stops the others.
The hooks are the one declaration of the kinds of spec: `KINDS` ({"models": ModelSpec, ...}) is read
off them (a hook `register_<kind>` whose callback takes that spec), and the catalog, the loader's
messages and `benchbench list` derive from it.
"""

from __future__ import annotations

import inspect
import sys
import typing
from typing import Callable

import pluggy

from benchbench.specs import DatasetSpec, ExecutorSpec, ModelSpec, ProtocolSpec, ReporterSpec

hookspec = pluggy.HookspecMarker("benchbench")
hookimpl = pluggy.HookimplMarker("benchbench")
PREFIX = "register_"


@hookspec
def register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register model plugins. Collect-all.

    :param register: call once per :class:`~benchbench.specs.ModelSpec`; an id or alias already
        registered by another plugin is an error naming both plugins.
    """


@hookspec
def register_datasets(register: Callable[[DatasetSpec], None]) -> None:
    """Register dataset plugins. Collect-all.

    :param register: call once per :class:`~benchbench.specs.DatasetSpec`.
    """


@hookspec
def register_protocols(register: Callable[[ProtocolSpec], None]) -> None:
    """Register evaluation protocols (scratch, finetune, ...). Collect-all.

    :param register: call once per :class:`~benchbench.specs.ProtocolSpec`.
    """


@hookspec
def register_executors(register: Callable[[ExecutorSpec], None]) -> None:
    """Register executors: where a suite's cells run (in process, Slurm, Ray, ...). Collect-all.

    :param register: call once per :class:`~benchbench.specs.ExecutorSpec`.
    """


@hookspec
def register_reporters(register: Callable[[ReporterSpec], None]) -> None:
    """Register reporters: trackers a run's results are exported to (`benchbench export`). Collect-all.

    :param register: call once per :class:`~benchbench.specs.ReporterSpec`.
    """


def _kinds() -> dict[str, type]:
    """{kind: spec class} of this module's hooks, in the order they are declared."""
    out = {}
    module = sys.modules[__name__]
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if name.startswith(PREFIX) and hasattr(fn, "benchbench_spec"):
            register = typing.get_type_hints(fn)["register"]
            out[name[len(PREFIX):]] = (fn.__code__.co_firstlineno, typing.get_args(register)[0][0])
    return {kind: cls for kind, (_, cls) in sorted(out.items(), key=lambda kv: kv[1][0])}


KINDS = _kinds()
