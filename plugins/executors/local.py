"""Executor `local`: every cell in this process, one after the other (the default)."""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.run.dispatch import Dispatch
from benchbench.run.worker import execute
from benchbench.specs import ExecutorSpec


class Local:
    def check(self, context, cells) -> None:
        pass  # nothing to reach

    def run(self, cells, dispatch: Dispatch) -> None:
        for cell in cells:
            dispatch.started(cell)
            record = execute(dispatch.job(cell), catalog=dispatch.catalog, mac_counts=dispatch.mac_counts)
            dispatch.finished(record, cell)

    def close(self) -> None:
        pass


@hookimpl
def register_executors(register) -> None:
    register(ExecutorSpec(
        id="local", name="In this process", create=lambda options: Local(), default=True, in_process=True,
        description="every cell in this process, one after the other, on --device",
    ))
