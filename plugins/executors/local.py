"""Executor `local`: the cells one after the other on this machine, on --device (the default), each in
a fresh process of its own (`isolate`, the default: benchbench.run.isolated) or in this process."""

from __future__ import annotations

from benchbench import hookimpl
from benchbench.store.record import Record
from benchbench.runtime.rendezvous import records_the_cell
from benchbench.run.dispatch import Dispatch
from benchbench.run.isolated import run_apart
from benchbench.run.worker import died_record, execute
from benchbench.store.shared import append_once
from benchbench.specs import ExecutorSpec, Setting

OPTIONS = {
    "isolate": Setting(True, bool, "run each cell in a fresh process of its own (a crash, a CUDA error or the "
                       "time limit ends that process, not the run); false: every cell in this process"),
}


class Local:
    def __init__(self, options):
        self.isolate = bool(options.get("isolate", True))

    def check(self, context, cells) -> None:
        pass  # nothing to reach

    def run(self, cells, dispatch: Dispatch) -> None:
        for cell in cells:
            dispatch.started(cell)
            if self.isolate:
                record = run_apart(dispatch.job(cell), catalog=dispatch.catalog, mac_counts=dispatch.mac_counts,
                                   fault=lambda job, measured, error, trace: _fault(dispatch, job, measured, error, trace))
            else:
                record = execute(dispatch.job(cell), catalog=dispatch.catalog, mac_counts=dispatch.mac_counts)
            dispatch.finished(record, cell)

    def close(self) -> None:
        pass


def _fault(dispatch: Dispatch, job, measured, error: str, trace: str) -> Record:
    """The failed record of a cell whose process died, appended once; the record its process appended
    for this job before dying, if any, stands instead."""
    record = died_record(job, dispatch.catalog, measured, error, trace)
    if not records_the_cell():  # a later node of a multi-node launch: node 0 records the cell
        return record
    if append_once(dispatch.run_dir, record):
        return record
    return dispatch.collected(job.cell, record.job_id) or record


@hookimpl
def register_executors(register) -> None:
    register(ExecutorSpec(
        id="local", name="On this machine", create=Local, default=True, in_process=True, options=OPTIONS,
        description="the cells one after the other on --device, each in a fresh process (isolate = false: in "
                    "this process)",
    ))
