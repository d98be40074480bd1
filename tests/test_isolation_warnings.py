"""A cell stopped at its time limit leaves nothing for Python's resource tracker to warn of (issue 44): a
named semaphore it made through a spawn context (torch's elastic launcher makes eleven for a data-parallel
cell, and turns the SIGTERM that stops the cell into a KeyboardInterrupt) is cleaned up by the cell's own
process as it exits, as a normal exit would; the run's stderr has no "leaked semaphore" warning when the
run ends. The run is the console script as users start it: the tracker warns as the driver exits."""

from __future__ import annotations

import pytest

LEAKY = """
import multiprocessing
import signal
import time
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec


def _stopped(signum, frame):
    raise KeyboardInterrupt("stopped by SIGTERM")  # what torch's elastic launcher makes of SIGTERM


HELD = []  # alive as the cell's process exits, as a library's own references (the launcher's) keep them


def run(ctx):
    # Named semaphores that the resource tracker is told of (a spawn context's; a fork context's are
    # unlinked at once), made as the elastic launcher makes its events and queues.
    HELD.extend([multiprocessing.get_context("spawn").Lock(), multiprocessing.get_context("spawn").Event()])
    signal.signal(signal.SIGTERM, _stopped)
    while True:  # Python code: the handler runs at once when the limit stops the cell
        time.sleep(0.05)


@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="leaky", name="Leaky", run=run, needs_initialised_model=False, reads=(),
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


@pytest.mark.slow  # the console script, its fork server and a cell run to a time limit: ~30 s at load
def test_a_cell_stopped_at_its_time_limit_leaks_no_semaphore(run_suite):
    run_suite.plugin(LEAKY, "leaky.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["leaky"]
    """)
    proc = run_suite.start("--cell-time-limit", "3")  # isolated cells: the command's default
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err
    (record,) = run_suite.records()
    assert record.error.startswith("CellTimeLimit: the cell ran longer than its limit of 3 s")
    assert "leaked semaphore" not in err and "resource_tracker" not in err, err
