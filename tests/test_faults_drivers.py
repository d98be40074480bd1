"""Concurrent drivers and mixed runs (issue 27, category 7): two `benchbench run SUITE` started at the
same instant make one run between them (the second is refused in one line while
the first runs); `--run-dir` naming another suite's run, or a run of the other mode, is refused."""

from __future__ import annotations

import time

import pytest

from benchbench.store.rundir import RECORDS


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_two_drivers_started_at_once_make_one_run(run_suite, gated, gate):
    gated.suite(run_suite, 2, gate)
    procs = [run_suite.start(), run_suite.start()]
    deadline = time.monotonic() + 300
    while all(p.poll() is None for p in procs):  # the one refused stops; the other waits at the gate
        assert time.monotonic() < deadline, "neither driver stopped"
        time.sleep(0.05)
    gate.open()
    outs = [(p.returncode if p.poll() is not None else None, *p.communicate(timeout=600)) for p in procs]
    outs = [(p.returncode, out, err) for p, (_, out, err) in zip(procs, outs)]
    assert sorted(code for code, _, _ in outs) == [0, 2], outs
    (refused,) = [err for code, _, err in outs if code == 2]
    lines = refused.strip().splitlines()
    assert len(lines) == 1 and "is being run by another `benchbench run`" in lines[0] and "--fresh" in lines[0]
    assert len(run_suite.run_dirs()) == 1
    assert sorted(r.seed for r in run_suite.records()) == [0, 1]


def test_a_run_dir_of_another_suite_or_mode_is_refused(run_suite, gated, capsys):
    gated.suite(run_suite, 1, None, name="one")
    assert run_suite.run() == 0
    theirs = run_suite.run_dir
    gated.suite(run_suite, 1, None, name="two")
    capsys.readouterr()
    assert run_suite.run("--run-dir", str(theirs)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a run of suite 'one', not 'two'" in err[0] and "benchbench run one --run-dir" in err[0]
    gated.suite(run_suite, 1, None, name="one")
    assert run_suite.run("--run-dir", str(theirs), "--quick") == 2
    assert "a full run of 'one'" in capsys.readouterr().err
    assert len((theirs / RECORDS).read_text().splitlines()) == 1
