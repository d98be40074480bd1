"""The hooks a benchbench plugin may implement. Each receives a `register` callback.

Every hook here is collect-all: the implementations of all plugins are called, none stops the others.
"""

from __future__ import annotations

from typing import Callable

import pluggy

from benchbench.executors import ExecutorSpec
from benchbench.specs import DatasetSpec, ModelSpec, ProtocolSpec

hookspec = pluggy.HookspecMarker("benchbench")
hookimpl = pluggy.HookimplMarker("benchbench")


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

    :param register: call once per :class:`~benchbench.executors.ExecutorSpec`.
    """
