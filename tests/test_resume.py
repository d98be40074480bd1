"""Resumable, fault-tolerant runs, with real processes: SIGKILL, Ctrl-C, SIGTERM, a second run on
the same directory, a torn last line.

The runs use the `gated` protocol (tests/conftest.py), which synchronises with the test instead of
taking a set time: the test lets cells (and writes) through one at a time and signals the child while it
is known to be at a given moment, however fast or slow the machine is. Every wait has a deadline."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchbench.store import results
from benchbench.store.rundir import RECORDS, RunLock, repair_torn_tail


def _inside_cell(run_suite, gated, gate, seed: int, proc: subprocess.Popen) -> Path:
    """Lets the cells before `seed` through and waits until the run is inside the cell of `seed`:
    the earlier cells are then recorded, that one is not."""
    gate.let_through(*range(seed))
    gated.wait_for(lambda: gate.started(seed), f"start of the cell of seed {seed}", proc)
    return run_suite.run_dir


def _ok_keys(run_dir: Path) -> list[str]:
    return [r["key"] for r in results.load(run_dir, all_attempts=True).to_dict("records") if r["status"] == "ok"]


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_sigkill_mid_suite_then_resume_has_every_cell_exactly_once(run_suite, gated, gate):
    gated.suite(run_suite, 8, gate)
    proc = run_suite.start()
    run_dir = _inside_cell(run_suite, gated, gate, 3, proc)
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


@pytest.mark.expected(seconds=9)  # default step, 2 cores: started first, so that none runs alone at its end
def test_ctrl_c_stops_with_a_consistent_store(run_suite, gated, gate):
    gated.suite(run_suite, 6, gate)
    proc = run_suite.start()
    run_dir = _inside_cell(run_suite, gated, gate, 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "Run the same command again to resume" in err and "Traceback" not in err
    text = (run_dir / RECORDS).read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    assert results.load(run_dir).attrs["problems"] == []
    assert 2 <= len(text.splitlines()) < 6
    assert len(text.splitlines()) == 2  # interrupted inside the third cell


@pytest.mark.slow  # six gated cells in two processes; test_the_lock_is_released_when_its_owner_is_killed stays default
def test_a_second_run_on_the_same_directory_is_refused_and_sigterm_stops_the_first(run_suite, gated, gate):
    gated.suite(run_suite, 6, gate)
    first = run_suite.start()
    run_dir = _inside_cell(run_suite, gated, gate, 1, first)  # one cell recorded, the lock held
    second = run_suite.cli(*run_suite.argv(), timeout=120)  # the same command: the suite's driver lock
    assert second.returncode == 2, second.stderr
    assert "is being run by another `benchbench run`" in second.stderr and "--fresh" in second.stderr
    named = run_suite.cli(*run_suite.argv("--run-dir", str(run_dir)), timeout=120)  # the run's own lock
    assert named.returncode == 2, named.stderr
    assert f"{run_dir} is in use by pid {first.pid}" in named.stderr and "--fresh" in named.stderr
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130 and "interrupted:" in err
    assert (run_dir / RECORDS).read_text().endswith("\n")
    with RunLock(run_dir):  # released by the interrupted run
        pass


def test_the_lock_is_released_when_its_owner_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from benchbench.store.rundir import RunLock
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


def test_a_torn_last_line_is_reported_cut_and_its_cell_runs_again(run_suite, gated, capsys):
    gated.suite(run_suite, 3, None)
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


def test_dry_run_lists_cells_done_and_to_run_and_runs_nothing(run_suite, gated, capsys):
    gated.suite(run_suite, 2, None)
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


# Moments of a 3-cell run at which it is stopped: (name, environment that holds the child there, how to get
# there, records on disk at that moment). "write" holds the child inside the append of the second record,
# after the line is written and flushed, before its fsync.
MOMENTS = {
    "start-up": dict(env={"start": True}, records=0),
    "first cell": dict(env={}, records=0),
    "second cell": dict(env={}, records=1),
    "write": dict(env={"writes": True}, records=2),
}


def _reach(moment: str, gate, gated, proc) -> None:
    if moment == "start-up":
        gated.wait_for(lambda: (gate.path / "loading").exists(), "start-up", proc)
    elif moment == "first cell":
        gated.wait_for(lambda: gate.started(0), "the first cell", proc)
    elif moment == "second cell":
        gate.let_through(0)
        gated.wait_for(lambda: gate.started(1), "the second cell", proc)
    else:
        gate.let_write(1)
        gate.let_through(0, 1)
        gated.wait_for(lambda: gate.writing(2), "the second write", proc)


# Every pair runs under `slow`; these in the default run (each starts a process and resumes).
# SIGTERM and SIGKILL in the default run (the rest in the slow step): test_ctrl_c_stops_with_a_consistent_store
# covers Ctrl-C in the default run, test_sigkill_mid_suite_then_resume_has_every_cell_exactly_once kill -9
# in the slow step.
DEFAULT = {("first cell", signal.SIGTERM), ("second cell", signal.SIGKILL)}  # SIGINT: test_ctrl_c_stops_...


@pytest.mark.expected(seconds=9)  # default step, 2 cores: started first, so that none runs alone at its end
@pytest.mark.parametrize("moment,signum", [
    pytest.param(m, s, id=f"{m}-{s.name}", marks=() if (m, s) in DEFAULT else pytest.mark.slow)
    for m in MOMENTS for s in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)])
def test_a_signal_at_any_moment_loses_nothing_and_resume_completes(run_suite, gated, gate, moment, signum,
                                                                   tmp_path_factory):
    """Ctrl-C and `kill` exit 130 with no traceback, `kill -9` dies; either way every record written
    before is intact, nothing lands outside the results root, no cell's trace file is left in the
    temporary folder, and the same command completes the run."""
    gated.suite(run_suite, 3, gate)
    before = sorted(p.relative_to(run_suite.dir) for p in run_suite.dir.rglob("*") if "r" not in p.parts[:1])
    temp = tmp_path_factory.mktemp("tmpdir")
    proc = run_suite.start(env={**gate.env(**MOMENTS[moment]["env"]), "TMPDIR": str(temp)})
    _reach(moment, gate, gated, proc)
    proc.send_signal(signum)
    if moment == "write":
        gate.let_write(2)  # Ctrl-C and SIGTERM wait until the record is on disk
    out, err = proc.communicate(timeout=120)
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err and "error:" not in err, err
    expected = MOMENTS[moment]["records"]
    runs = run_suite.run_dirs()
    if moment == "start-up":
        assert runs == []  # stopped before anything was written
    else:
        text = (runs[0] / RECORDS).read_text() if (runs[0] / RECORDS).exists() else ""
        assert text == "" or text.endswith("\n")
        assert [json.loads(line)["seed"] for line in text.splitlines()] == list(range(expected))
    after = sorted(p.relative_to(run_suite.dir) for p in run_suite.dir.rglob("*") if "r" not in p.parts[:1])
    assert [p for p in after if p not in before and p.parts[0] not in ("r", "gate")] == []
    assert sorted(p.name for p in temp.glob("benchbench-cell-*")) == []  # a SIGKILL skips the driver's `finally`

    gate.open()
    assert run_suite.run() == 0  # the same command resumes (or starts) the run
    keys = _ok_keys(run_suite.run_dir)
    assert len(keys) == 3 == len(set(keys))
    assert sorted(r.seed for r in run_suite.records()) == [0, 1, 2]


GROWS = """
from pathlib import Path
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting

def run(ctx):
    if ctx.seed == 1 and Path(__file__).with_name("fail").exists():
        raise RuntimeError("seed 1 fails this time")
    return {"top1": 0.5 + ctx.seed / 100}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="grows", name="Grows", run=run, needs_initialised_model=False,
                          settings=SETTINGS))
"""


def test_a_protocol_that_gains_a_setting_keeps_its_earlier_records(run_suite, capsys):
    """A setting added with the default that keeps what the protocol did before leaves its cells the
    same: their earlier records resume them (a done cell is not run again, a failed one is retried
    and its new record replaces the old in the table), though their stored keys were hashed
    without the setting. The setting at another value, or a changed default, is another cell."""
    v1 = '"lr": Setting(0.1, float, "lr")'
    plugin = run_suite.plugin(GROWS.replace("SETTINGS", "{" + v1 + "}"))
    run_suite.write('[suite]\nname = "grows"\nmodels = ["vit-mu7"]\ndatasets = ["fashion-mnist"]\n'
                    'protocols = ["grows"]\nseeds = [0, 1]\n')
    (plugin.parent / "fail").touch()
    assert run_suite.run() == 1  # seed 1 failed
    (plugin.parent / "fail").unlink()
    stored = [r.key for r in run_suite.records()]

    plugin.write_text(textwrap.dedent(GROWS.replace("SETTINGS", "{" + v1 + ', "warmup": Setting(0, int, "w")}')))
    capsys.readouterr()
    assert run_suite.run() == 0
    out, err = capsys.readouterr()
    assert "ran 1 cell now" in err  # seed 1, retried; seed 0 is done
    records = run_suite.records()
    assert [r.key for r in records[:2]] == stored and records[2].key not in stored
    assert records[2].seed == 1 and records[2].ok and dict(records[2].settings)["warmup"] == 0
    assert out.count("| ViT-Mu/7") == 1 and "failed" not in err  # the table: one row, no failure left

    run_suite.write(Path(run_suite.suite).read_text() + '[settings.grows]\nwarmup = 5\n')
    assert run_suite.run() == 0
    assert "ran 2 cells now" in capsys.readouterr().err  # warmup 5: other cells

    plugin.write_text(textwrap.dedent(GROWS.replace("SETTINGS", '{"lr": Setting(0.2, float, "lr"), '
                                                                '"warmup": Setting(0, int, "w")}')))
    run_suite.write(Path(run_suite.suite).read_text().replace("warmup = 5", "warmup = 0"))
    assert run_suite.run() == 0
    assert "ran 2 cells now" in capsys.readouterr().err  # lr's default changed: other cells
    assert len(run_suite.records()) == 7
