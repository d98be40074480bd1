"""Cells in processes of their own (issue 36): a cell whose process dies (abort, segfault, SIGKILL)
becomes a failed record naming the signal, with what it had measured, while the other cells finish;
a re-run retries it; a cell past its time limit is ended with everything it started; the store keeps
one record per job and one ok record per cell."""

from __future__ import annotations

import os
import signal
import time

import pytest


@pytest.fixture(autouse=True)
def isolated(run_suite):
    """run_suite.run() as the command runs by default: each cell in a process of its own."""
    run_suite.isolate = True


CRASHING = """
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting


def run(ctx):
    how, seed = ctx.settings["how"], ctx.seed
    if seed == 1 and how == "abort":
        os.abort()
    if seed == 1 and how == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if seed == 1 and how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if seed == 1 and how == "hang":
        folder = Path(ctx.settings["folder"])
        child = subprocess.Popen(["sleep", "600"])  # something the cell started, that must not outlive it
        (folder / "pids").write_text(f"{os.getpid()} {child.pid}")
        ctypes.CDLL(None).sleep(600)  # native code that never returns to Python: no alarm can stop it
    return {"top1": 0.5 + seed / 100}


@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="crashing", name="Crashing", run=run, needs_initialised_model=False,
                          settings={"how": Setting("", str, "how seed 1 ends"),
                                    "folder": Setting("", str, "where seed 1 writes its pids")},
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


def _suite(run_suite, how: str, folder: str = "") -> None:
    run_suite.plugin(CRASHING, "crashing.py")
    run_suite.write(f"""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["crashing"]
        seeds = [0, 1, 2]
        [settings.crashing]
        how = "{how}"
        folder = "{folder}"
    """, "crashing.toml")


@pytest.mark.parametrize("how, signame, words", [
    ("abort", "SIGABRT", "Aborted"),
    ("segfault", "SIGSEGV", "Segmentation fault"),
    ("sigkill", "SIGKILL", "out-of-memory killer"),
])
def test_a_cell_whose_process_dies_is_a_failed_record_naming_the_signal(run_suite, capsys, how, signame, words):
    _suite(run_suite, how)
    assert run_suite.run() == 1
    records = {r.seed: r for r in run_suite.records()}
    assert sorted(records) == [0, 1, 2]
    assert records[0].ok and records[2].ok  # the suite went on
    dead = records[1]
    assert not dead.ok and dead.error.startswith(f"CellProcessDied: the cell's process was killed by {signame}")
    assert words in dead.error
    # what it had measured before it died, and where it ran
    assert dead.metrics["params"] > 0 and dead.metrics["gmacs"] > 0 and dead.flops_status == "ok"
    assert dead.started_at and dead.wall_seconds > 0 and dead.device == "cpu" and dead.job_id.startswith("local-")
    assert dead.env["threads"]["threads"] >= 1 and dead.env["device_name"]
    if how in ("abort", "segfault"):  # Python's fault handler: where the process was
        assert f"Fatal Python error: {words}" in dead.traceback and "crashing.py" in dead.traceback
    err = capsys.readouterr().err
    assert f"FAILED: CellProcessDied: the cell's process was killed by {signame}" in err and "Traceback" not in err
    # a re-run retries the failed cell only; each attempt is one record, the ok cells keep theirs
    assert run_suite.run() == 1
    again = run_suite.records()
    assert sorted(r.seed for r in again) == [0, 1, 1, 2]
    assert len({r.job_id for r in again}) == 4


def test_a_cell_past_its_time_limit_is_ended_with_all_it_started(run_suite, tmp_path):
    folder = tmp_path / "hang"
    folder.mkdir()
    _suite(run_suite, "hang", str(folder))
    start = time.monotonic()
    assert run_suite.run("--cell-time-limit", "8") == 1
    assert time.monotonic() - start < 120
    records = {r.seed: r for r in run_suite.records()}
    assert records[0].ok and records[2].ok
    stopped = records[1]
    assert stopped.error.startswith("CellTimeLimit: the cell ran longer than its limit of 8 s")
    assert "File" in stopped.traceback and "crashing.py" in stopped.traceback  # where it was, from SIGTERM
    assert stopped.metrics["params"] > 0
    cell, child = map(int, (folder / "pids").read_text().split())
    for pid in (cell, child):
        assert not _alive(pid), f"process {pid} outlived its cell"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does not run)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_record_appended_before_the_process_died_stands(run_suite):
    """The cell's process appends its ok record, then dies: the driver's failed record of the same job is
    not appended (one record per job, one ok record per cell), and the ok record is what the run reports."""
    run_suite.plugin(CRASHING + """

import benchbench.run.worker as _worker
_append = _worker.append_once

def _append_then_die(run_dir, record):
    written = _append(run_dir, record)
    if record.seed == 1 and os.getpgid(0) == os.getpid():  # in the cell's own process (never the test's)
        os.abort()
    return written

_worker.append_once = _append_then_die
""", "crashing.py")
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["crashing"]
        seeds = [0, 1]
    """, "crashing.toml")
    assert run_suite.run() == 0
    records = run_suite.records()
    assert sorted(r.seed for r in records) == [0, 1] and all(r.ok for r in records)


def test_in_this_process_with_no_isolate(run_suite):
    _suite(run_suite, "")
    assert run_suite.run("--no-isolate") == 0
    records = run_suite.records()
    assert all(r.ok and r.job_id is None for r in records) and os.getpid() > 0


def test_isolate_is_the_local_executors_option(run_suite, capsys):
    run_suite.plugin("""
        from benchbench import hookimpl
        from benchbench.specs import ExecutorSpec

        @hookimpl
        def register_executors(register):
            register(ExecutorSpec(id="elsewhere", name="Elsewhere", create=lambda options: None))
    """, "elsewhere.py")
    _suite(run_suite, "")
    assert run_suite.run("--no-isolate", "--executor", "elsewhere") == 2
    err = capsys.readouterr().err
    assert "--no-isolate: executor 'elsewhere' runs each cell in a process of its own" in err and "Traceback" not in err
    assert not run_suite.results.exists()


def test_the_signal_is_named_whatever_it_is():
    from benchbench.run.isolated import death

    assert death(-signal.SIGBUS, None, None, None).startswith(
        "CellProcessDied: the cell's process was killed by SIGBUS (Bus error")
    assert "oom_kill in the cgroup's memory.events went 2 -> 3" in death(-signal.SIGKILL, 2, 3, None)
    assert death(3, None, None, "OSError: disk full") == (
        "CellProcessDied: the cell's process exited with status 3 before writing its record; its last words: "
        "OSError: disk full")


@pytest.mark.slow  # two throughput measurements, one at batch 2048
def test_a_cells_peak_memory_is_its_own(run_suite):
    """On the CPU a cell's peak memory is its process's peak RSS: in the driver's process the second cell
    reports the first one's (measured: 1808.5 MiB for batch 2048, then 1808.5 MiB again for batch 8);
    each in its own process, its own (1525.1 and 433.7 MiB)."""
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["measure"]
        [settings.measure]
        throughput = "on"
        [sweep.measure]
        batch_size = [2048, 8]
    """, "memory.toml")
    assert run_suite.run() == 0
    peak = {r.settings["batch_size"]: r.metrics["train_peak_mem_mb"] for r in run_suite.records()}
    assert peak[8] < 0.5 * peak[2048]
