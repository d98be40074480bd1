"""Resumable, fault-tolerant runs, with real processes: SIGKILL, Ctrl-C, SIGTERM, a second run on
the same directory, a torn last line.

The runs use a protocol that synchronises with the test instead of taking a set time: at the start of
a cell it creates <gate>/started-<seed>, then waits until the test creates <gate>/go-<seed> (or
<gate>/go-all). The test lets cells through one at a time and signals the child while it is known to
be inside a given cell, however fast or slow the machine is. Every wait has a deadline."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchbench import results
from benchbench.store import RECORDS, RunLock, repair_torn_tail

GATED_PLUGIN = """
import time
from pathlib import Path
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting

def run(ctx):
    if ctx.settings["gate"]:
        gate = Path(ctx.settings["gate"])
        (gate / f"started-{ctx.seed}").touch()
        deadline = time.monotonic() + 300  # a test that never lets the cell through fails, not hangs
        while not ((gate / f"go-{ctx.seed}").exists() or (gate / "go-all").exists()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell of seed {ctx.seed} was not let through in 300 s")
            time.sleep(0.01)
    return {"top1": 0.5 + ctx.seed / 100}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="gated", name="Gated", run=run, needs_initialised_model=False,
                          settings={"gate": Setting("", str, "folder to wait in for the test; '' for none")},
                          estimate=lambda s, d: {"train_images": 0.0, "eval_images": 0.0}))
"""


class Gate:
    """The test's side of the gated protocol."""

    def __init__(self, path: Path):
        path.mkdir()
        self.path = path

    def let_through(self, *seeds: int) -> None:
        for seed in seeds:
            (self.path / f"go-{seed}").touch()

    def open(self) -> None:
        (self.path / "go-all").touch()

    def started(self, seed: int) -> bool:
        return (self.path / f"started-{seed}").exists()


@pytest.fixture
def gate(tmp_path) -> Gate:
    return Gate(tmp_path / "gate")


def wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Polls `condition` until it holds; fails if `proc` exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.02)


def _suite(run_suite, seeds: int, gate: Gate | None) -> None:
    run_suite.plugin(GATED_PLUGIN, "gated.py")
    run_suite.write(f"""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["gated"]
        seeds = {list(range(seeds))}
        [settings.gated]
        gate = "{gate.path if gate else ''}"
    """, "gated.toml")


def _inside_cell(run_suite, gate: Gate, seed: int, proc: subprocess.Popen) -> Path:
    """Lets the cells before `seed` through and waits until the run is inside the cell of `seed`:
    the earlier cells are then recorded, that one is not."""
    gate.let_through(*range(seed))
    wait_for(lambda: gate.started(seed), f"start of the cell of seed {seed}", proc)
    return run_suite.run_dir


def _ok_keys(run_dir: Path) -> list[str]:
    return [r["key"] for r in results.load(run_dir, all_attempts=True).to_dict("records") if r["status"] == "ok"]


def test_sigkill_mid_suite_then_resume_has_every_cell_exactly_once(run_suite, gate):
    _suite(run_suite, seeds=8, gate=gate)
    proc = run_suite.start()
    run_dir = _inside_cell(run_suite, gate, 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = _ok_keys(run_dir)
    assert 3 <= len(before) < 8
    assert len(before) == 3  # killed inside the fourth cell

    gate.open()
    assert run_suite.run() == 0  # the same command resumes
    keys = _ok_keys(run_dir)
    assert len(keys) == 8 and len(set(keys)) == 8  # every cell exactly once
    assert keys[:len(before)] == before  # finished cells were kept, not re-run
    assert sorted(r["seed"] for r in results.load(run_dir).to_dict("records")) == list(range(8))
    assert run_suite.run_dirs() == [run_dir]  # no second run dir

    assert run_suite.run("--fresh") == 0  # --fresh: a new run directory, all cells again
    assert len(run_suite.run_dirs()) == 2


def test_ctrl_c_stops_with_a_consistent_store(run_suite, gate):
    _suite(run_suite, seeds=6, gate=gate)
    proc = run_suite.start()
    run_dir = _inside_cell(run_suite, gate, 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "Run the same command again to resume" in err and "Traceback" not in err
    text = (run_dir / RECORDS).read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    assert results.load(run_dir).attrs["problems"] == []
    assert 2 <= len(text.splitlines()) < 6
    assert len(text.splitlines()) == 2  # interrupted inside the third cell


def test_a_second_run_on_the_same_directory_is_refused_and_sigterm_stops_the_first(run_suite, gate):
    _suite(run_suite, seeds=6, gate=gate)
    first = run_suite.start()
    run_dir = _inside_cell(run_suite, gate, 1, first)  # one cell recorded, the lock held
    second = run_suite.cli(*run_suite.argv(), timeout=120)
    assert second.returncode == 2, second.stderr
    assert f"{run_dir} is in use by pid {first.pid}" in second.stderr and "--fresh" in second.stderr
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130 and "interrupted:" in err
    assert (run_dir / RECORDS).read_text().endswith("\n")
    with RunLock(run_dir):  # released by the interrupted run
        pass


def test_the_lock_is_released_when_its_owner_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from benchbench.store import RunLock
        with RunLock({str(tmp_path)!r}):
            print("locked", flush=True)
            sys.stdin.read()  # holds the lock until killed (or its stdin closes)
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(Exception, match=f"in use by pid {holder.pid}"):
            RunLock(tmp_path).__enter__()
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    with RunLock(tmp_path):
        pass


def test_a_torn_last_line_is_reported_cut_and_its_cell_runs_again(run_suite, capsys):
    _suite(run_suite, seeds=3, gate=None)
    assert run_suite.run() == 0
    (run_dir,) = (run_suite.results / "gated").iterdir()
    lines = (run_dir / RECORDS).read_text().splitlines(keepends=True)
    torn = lines[2][: len(lines[2]) // 2]  # power loss while the third record was written
    (run_dir / RECORDS).write_text("".join(lines[:2]) + torn)
    assert results.load(run_dir).attrs["problems"][0].endswith("torn last line (the run was interrupted while "
                                                                "writing it); ignored")
    assert len(results.load(run_dir)) == 2
    capsys.readouterr()

    assert run_suite.run() == 0
    err = capsys.readouterr().err
    assert "the last line was torn" in err and "2 done, 1 to run" in err
    assert (run_dir / (RECORDS + ".torn")).read_text() == torn + "\n"
    keys = _ok_keys(run_dir)
    assert len(keys) == 3 == len(set(keys)) and results.load(run_dir).attrs["problems"] == []


def test_repair_leaves_a_whole_file_alone(tmp_path):
    assert repair_torn_tail(tmp_path) is None
    (tmp_path / RECORDS).write_text('{"key": "a"}\n')
    assert repair_torn_tail(tmp_path) is None
    assert (tmp_path / RECORDS).read_text() == '{"key": "a"}\n'


def test_dry_run_lists_cells_done_and_to_run_and_runs_nothing(run_suite, capsys):
    _suite(run_suite, seeds=2, gate=None)
    assert run_suite.run("--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("| todo ") == 2 and "run directory: a new one" in out and "2 cells: 0 done, 2 to run" in out
    assert not run_suite.results.exists()
    assert run_suite.run() == 0
    capsys.readouterr()
    suite = Path(run_suite.suite)
    suite.write_text(suite.read_text().replace("[0, 1]", "[0, 1, 2]"))
    assert run_suite.run("--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("| done ") == 2 and out.count("| todo ") == 1 and "3 cells: 2 done, 1 to run" in out
