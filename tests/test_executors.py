"""Executors as plugins, their options, and the run directory under many writers (fast; no cluster).

The cluster tests (tests/test_cluster.py, marker `cluster`) run the real engines."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

MEASURE = """
    [suite]
    name = "m"
    models = ["vit-mu7"]
    datasets = ["fashion-mnist"]
    protocols = ["measure"]
"""

NEEDS_A_PACKAGE = """
from benchbench import hookimpl
from benchbench.specs import ExecutorSpec

@hookimpl
def register_executors(register):
    register(ExecutorSpec(id="faraway", name="Far away", create=lambda options: None,
                          requires=("benchbench_no_such_package",), extra="faraway"))
"""


def test_the_builtin_executors_are_registered_and_local_is_the_default(catalog):
    from benchbench.run.dispatch import default_executor

    assert {"local", "slurm", "ray"} <= {s.id for s in catalog.executors}
    assert default_executor(catalog).id == "local"
    assert catalog.executors.get("slurm").extra == "slurm" and catalog.executors.get("ray").extra == "ray"


@pytest.mark.parametrize("args, message", [
    (["--executor", "slurn"], "unknown executor id 'slurn'; did you mean 'slurm'?"),
    (["--executor", "slurm", "--executor-option", "partiton=gpu"],
     "unknown slurm executor option 'partiton'; did you mean 'partition'?"),
    (["--executor", "slurm", "--executor-option", "time_limit_min=soon"],
     "time_limit_min: expected int, got str 'soon'"),
    (["--executor", "slurm", "--executor-option", "time_min=soon"], "time_min: expected int, got str 'soon'"),
    (["--executor", "ray", "--executor-option", "num_cpus=-1"], "num_cpus = -1.0: must be >= 0"),
    (["--executor", "slurm", "--executor-option", "partition"], "--executor-option 'partition': write KEY=VALUE"),
])
def test_unknown_executors_and_options_are_refused_before_anything_is_written(run_suite, capsys, args, message):
    run_suite.write(MEASURE)
    assert run_suite.run(*args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not run_suite.results.exists()


def test_a_suites_executor_table_is_validated(run_suite, capsys):
    run_suite.write(MEASURE + """
    [executor]
    name = "slurm"
    [executor.slurm]
    qso = "high"
    """)
    assert run_suite.run() == 2
    assert "[executor.slurm]: unknown slurm executor option 'qso'; did you mean 'qos'?" in capsys.readouterr().err
    run_suite.write(MEASURE + """
    [executor.rya]
    address = "auto"
    """)
    assert run_suite.run() == 2
    assert "[executor.rya]: unknown executor id 'rya'; did you mean 'ray'?" in capsys.readouterr().err
    assert not run_suite.results.exists()


@pytest.mark.cluster  # choosing slurm and ray checks their packages, which scripts/ci-setup-cluster.sh installs
def test_a_suites_executor_table_picks_the_executor_and_its_options(catalog, tmp_path):
    from benchbench.run.dispatch import choose
    from benchbench.plan.suite import load_suite

    path = tmp_path / "s.toml"
    path.write_text(MEASURE.replace("    ", "") + '[executor]\nname = "slurm"\nmax_parallel = 3\n'
                    '[executor.slurm]\npartition = "gpu"\ntime_min = 30\n[executor.ray]\nnum_gpus = 1\n')
    suite = load_suite(str(path), catalog)
    choice = choose(catalog, suite, None, ["time_min=10"], None)
    assert choice.spec.id == "slurm" and choice.max_parallel == 3
    # time_min, the option's older name, is read as time_limit_min; the command line wins
    assert choice.options["partition"] == "gpu" and choice.options["time_limit_min"] == 10 and "time_min" not in (
        choice.options)
    ray = choose(catalog, suite, "ray", [], 5)
    assert ray.options["num_gpus"] == 1.0 and ray.max_parallel == 5
    assert choose(catalog, load_suite(str(path), catalog), "local", [], None).spec.id == "local"


@pytest.mark.cluster  # submitit, which scripts/ci-setup-cluster.sh installs, names the warning signal
def test_a_slurm_worker_killed_by_the_time_limits_warning_is_a_time_limit(tmp_path, monkeypatch):
    """Slurm may send the time limit's warning (SIGUSR2) up to a minute early: with a one-minute limit
    it can come while the worker's Python is starting, and kill it before any handler is installed
    (CI saw "crashed ... (state FAILED)" for a cell that hit its limit). sacct's DerivedExitCode 0:12
    tells it: the job hit its time limit. The lines are sacct's own for such jobs (Slurm 23)."""
    import signal as signals

    from plugins.executors import slurm

    sacct = tmp_path / "bin" / "sacct"
    sacct.parent.mkdir()
    sacct.write_text("#!/bin/sh\nprintf '14|FAILED|vm|0:12\\n15|FAILED|vm|0:9\\n16|COMPLETED|vm|0:0\\n"
                     "17|RUNNING||\\n'\n")
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{sacct.parent}:{os.environ['PATH']}")
    known = slurm.states(["14", "15", "16", "17"])
    assert known == {"14": ("FAILED", "vm", 12), "15": ("FAILED", "vm", 9), "16": ("COMPLETED", "vm", 0),
                     "17": ("RUNNING", "", 0)}
    assert slurm.warning_signal() == signals.SIGUSR2
    assert slurm.timed_out(tmp_path, "14", 12) and not slurm.timed_out(tmp_path, "15", 9)
    assert slurm._ended("FAILED", 9) == "state FAILED, its worker killed by SIGKILL"
    assert slurm._ended("COMPLETED", 0) == "state COMPLETED"


def test_an_executor_whose_package_is_missing_names_the_extra(run_suite, capsys):
    run_suite.plugin(NEEDS_A_PACKAGE, "faraway.py")
    run_suite.write(MEASURE)
    assert run_suite.run("--executor", "faraway") == 2
    err = capsys.readouterr().err
    assert "needs the Python package 'benchbench_no_such_package'" in err
    assert "pip install 'benchbench[faraway]'" in err
    assert not run_suite.results.exists()


def test_no_slurm_reachable_is_a_clear_error_before_anything_is_written(run_suite, tmp_path):
    pytest.importorskip("submitit")
    run_suite.write(MEASURE)
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_suite.cli(*run_suite.argv("--executor", "slurm"), env={"PATH": str(empty)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no Slurm here (`sbatch` is not on PATH)" in proc.stderr
    assert not run_suite.results.exists()


def test_no_ray_cluster_reachable_is_a_clear_error_before_anything_is_written(run_suite, capsys):
    pytest.importorskip("ray")
    run_suite.write(MEASURE)
    assert run_suite.run("--executor", "ray", "--executor-option", "address=127.0.0.1:1") == 2
    err = capsys.readouterr().err
    assert "no Ray cluster reachable at address '127.0.0.1:1'" in err and "Traceback" not in err
    assert not run_suite.results.exists()


@pytest.mark.parametrize("isolate", ["--isolate", "--no-isolate"])
def test_the_local_executor_records_where_each_cell_ran(run_suite, isolate):
    run_suite.write(MEASURE)
    assert run_suite.run(isolate) == 0
    (record,) = run_suite.records()
    assert record.executor == "local" and record.node == os.uname().nodename
    # a cell's own process is a job of its own (one record per job: benchbench.store.shared); in this one, none
    assert record.job_id.startswith("local-") if isolate == "--isolate" else record.job_id is None
    assert not (run_suite.run_dir / "jobs.jsonl").exists()  # nothing to re-attach to


# --- many writers ------------------------------------------------------------------------------------------


def _writer(run_dir: str, key: str, job_id: str | None, status: str, barrier, out) -> None:
    from benchbench.store.record import Record
    from benchbench.store.shared import append_once

    barrier.wait()  # every writer appends at the same moment
    out.put(append_once(Path(run_dir), Record(key=key, status=status, model="m", dataset="d", protocol="p", seed=0,
                                              job_id=job_id)))


def test_many_writers_append_a_cells_record_once(tmp_path):
    """Eight processes write the same ok cell at once: one line lands. Failed records of different jobs
    of one cell all land (each job's end is a fact); the same job's twice does not."""
    ctx = multiprocessing.get_context("fork")
    cases = [("done", f"job{i}", "ok") for i in range(8)] + [("retried", "a", "failed"), ("retried", "b", "failed"),
                                                             ("retried", "a", "failed")]
    # Earlier records make "already there?" take a while: without the lock, writers race through it.
    filler = json.dumps({"key": "other", "status": "failed", "model": "m", "dataset": "d", "protocol": "p", "seed": 0})
    (tmp_path / "records.jsonl").write_text((filler + "\n") * 20000)
    barrier, out = ctx.Barrier(len(cases)), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), key, job, status, barrier, out))
             for key, job, status in cases]
    for proc in procs:
        proc.start()
    written = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join()
    lines = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()[20000:]]
    assert [o["key"] for o in lines].count("done") == 1
    assert sorted(o["job_id"] for o in lines if o["key"] == "retried") == ["a", "b"]
    assert sum(written) == len(lines) == 3


def test_a_torn_line_left_by_a_dead_writer_does_not_swallow_the_next_record(tmp_path):
    from benchbench.store.record import Record
    from benchbench.store.shared import append_once
    from benchbench.store.rundir import read_records

    (tmp_path / "records.jsonl").write_text('{"key": "a", "status": "ok"')  # a writer killed mid-line
    assert append_once(tmp_path, Record(key="b", status="ok", model="m", dataset="d", protocol="p", seed=0))
    read = read_records(tmp_path)
    assert [r.key for r in read.records] == ["b"] and len(read.problems) == 1


def test_the_journal_keeps_each_cells_newest_job_per_executor(tmp_path):
    from benchbench.store.shared import Journal

    journal = Journal(tmp_path)
    journal.add("k1", "slurm", "11")
    journal.add("k1", "slurm", "12")
    journal.add("k2", "ray", "ab")
    assert {k: e.job_id for k, e in Journal(tmp_path).latest("slurm").items()} == {"k1": "12"}
    assert journal.submissions("k1") == 2


def test_records_without_the_new_fields_still_read_and_none_is_not_written(make_record):
    from benchbench.store.record import Record

    old = make_record("vit-mu7", top1=0.5).to_json()
    for name in ("executor", "node", "job_id", "attempts"):
        assert name not in old  # None fields stay out of the JSON
    record = Record.from_json(old)
    assert record.executor is None and record.job_id is None


def test_list_executors_shows_each_with_its_options(run_suite):
    proc = run_suite.cli("list", "executors", "--json")
    rows = {row["id"]: row for row in json.loads(proc.stdout)}
    assert rows["local"]["default"] and not rows["slurm"]["default"]
    assert rows["slurm"]["extra"] == "slurm" and rows["slurm"]["options"]["time_limit_min"]["default"] == 60
    assert rows["ray"]["options"]["address"]["default"] == "auto"


@pytest.mark.parametrize("procid, recorded", [("1", 0), ("0", 1)])
def test_only_a_jobs_first_task_records_its_cell(catalog, tmp_path, monkeypatch, procid, recorded):
    """A cell on several nodes is one Slurm task per node: every task runs it, and only the first
    (SLURM_PROCID 0, node 0, where rank 0 lives) appends a record; the others' would be partial."""
    from benchbench.run.context import RunContext
    from benchbench.run.worker import Job, execute
    from benchbench.store.rundir import read_records
    from benchbench.plan.suite import load_suite

    path = tmp_path / "m.toml"
    path.write_text(MEASURE.replace("    ", ""))  # measure on the CPU: params and MACs, no timing
    cell = load_suite(str(path), catalog).cells[0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("SLURM_PROCID", procid)
    job = Job(RunContext(run_dir=run_dir, suite="m", device="cpu", executor="slurm"), cell)
    assert execute(job, catalog=catalog).ok
    assert len(read_records(run_dir, missing_ok=True).records) == recorded


def test_a_schedulers_words_are_recorded_without_terminal_escapes(catalog, tmp_path):
    """Engines colour their errors for a terminal (Ray wraps a task's error in escapes): a record's
    error and traceback are plain text."""
    from benchbench.run.context import RunContext
    from benchbench.run.dispatch import Dispatch, default_choice
    from benchbench.plan.suite import load_suite
    from benchbench.text import plain

    path = tmp_path / "m.toml"
    path.write_text(MEASURE.replace("    ", ""))
    cell = load_suite(str(path), catalog).cells[0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dispatch = Dispatch(RunContext(run_dir=run_dir, suite="m"), catalog, default_choice(catalog), 1)
    record = dispatch.fault(cell, "\x1b[31mray task 7 failed: \x1b[36mray::_work()\x1b[39m FileNotFoundError\x07",
                            job_id="7")
    assert record.error == "SchedulerError: ray task 7 failed: ray::_work() FileNotFoundError"
    assert plain("a\tb\nc\x1b]8;;http://x\x07d\x1b]8;;\x07\x9b") == "a\tb\ncd"
