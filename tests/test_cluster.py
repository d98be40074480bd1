"""Suites on a real single-node Slurm (submitit, with accounting) and a real Ray head, started by
scripts/cluster.sh: the same keys and metrics as the in-process run; a driver killed with jobs in
flight re-attaches without resubmitting; cancelled, timed-out and killed jobs become failed records
with the scheduler's reason, and the suite goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

MEASURE = """
    [suite]
    name = "m"
    models = ["vit-mu7", "bit-r20x1-small"]
    datasets = ["fashion-mnist"]
    protocols = ["measure"]
"""


def nap_suite(*naps: dict) -> str:
    """A suite of `nap` cells, one per dict of settings (seconds, pid_file)."""
    groups = "".join(f"""
    [[group]]
    models = ["vit-mu7"]
    protocols = ["nap"]
    settings.nap = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in nap.items())} }}
    """ for nap in naps)
    return f"""
    [suite]
    name = "naps"
    datasets = ["fashion-mnist"]
    {groups}"""


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _journal(run_dir: Path) -> list[dict]:
    path = run_dir / "jobs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _metrics(records) -> dict:
    drop = {"wall_seconds"}
    return {r.key: {k: v for k, v in r.metrics.items() if k not in drop} for r in records}


@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_a_suite_on_an_executor_gives_the_local_keys_and_metrics(run_suite, cluster, monkeypatch, executor, tmp_path):
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    run_suite.write(MEASURE)
    assert run_suite.run("--results", str(tmp_path / "local")) == 0
    local = run_suite.records(next((tmp_path / "local").glob("*/*")))
    options = ["--executor-option", f"address={cluster.ray_address}"] if executor == "ray" else []
    assert run_suite.run("--executor", executor, *options) == 0
    remote = run_suite.records()
    assert _metrics(remote) == _metrics(local) and len(remote) == 2
    for record in remote:
        assert record.executor == executor and record.node == os.uname().nodename and record.job_id
    assert all(r.executor == "local" and r.job_id is None for r in local)
    jobs = _journal(run_suite.run_dir)
    assert sorted((j["key"], j["job_id"]) for j in jobs) == sorted((r.key, r.job_id) for r in remote)


def test_slurm_driver_killed_with_jobs_in_flight_reattaches_without_resubmitting(run_suite, cluster):
    run_suite.plugin(cluster.nap)
    run_suite.write(nap_suite({"seconds": 1.0}, {"seconds": 25.0}))
    driver = run_suite.start("--executor", "slurm", env=cluster.env)
    run_dir = _wait(lambda: run_suite.run_dirs(), 60, "the run directory")[0]
    _wait(lambda: len(_journal(run_dir)) == 2, 120, "two submitted jobs")
    driver.send_signal(signal.SIGKILL)
    driver.communicate()
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=run_suite.env(cluster.env))
    submitted = {j["job_id"] for j in _journal(run_dir)}
    assert submitted & set(queued.stdout.split()), "the jobs outlive their driver"

    again = run_suite.start("--executor", "slurm", env=cluster.env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert "re-attached to job" in err
    assert len(_journal(run_dir)) == 2  # nothing resubmitted
    records = run_suite.records()
    assert sorted(r.job_id for r in records) == sorted(submitted)  # each job's record, once
    assert Counter(r.key for r in records) == Counter({k: 1 for k in {j["key"] for j in _journal(run_dir)}})


def _slurm_job_of(pid: int) -> str:
    """The Slurm job a worker process belongs to, from its environment."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item.split(b"=", 1)[1].decode()
    raise AssertionError(f"process {pid} is not in a Slurm job")


def _pid(path: Path) -> int:
    return int(_wait(lambda: path.is_file() and path.read_text().strip(), 120, f"a worker's pid in {path}"))


def test_slurm_cancelled_and_killed_jobs_become_failed_records_and_the_suite_goes_on(run_suite, cluster, tmp_path):
    run_suite.plugin(cluster.nap)
    killed, cancelled = tmp_path / "killed.pid", tmp_path / "cancelled.pid"
    run_suite.write(nap_suite({"seconds": 120.0, "pid_file": str(killed)},
                              {"seconds": 120.0, "pid_file": str(cancelled)}, {"seconds": 1.0}))
    driver = run_suite.start("--executor", "slurm", env=cluster.env)
    killed_pid, cancelled_pid = _pid(killed), _pid(cancelled)
    killed_job, cancelled_job = _slurm_job_of(killed_pid), _slurm_job_of(cancelled_pid)
    os.kill(killed_pid, signal.SIGKILL)  # a worker killed mid-cell
    subprocess.run(["scancel", cancelled_job], check=True, env=run_suite.env(cluster.env))
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 1, err  # failed cells: exit status 1, after the table
    by_job = {r.job_id: r for r in run_suite.records()}
    assert len(by_job) == 3 and len(run_suite.records()) == 3
    assert "was cancelled" in by_job[cancelled_job].error and "CANCELLED" in by_job[cancelled_job].error
    assert "crashed" in by_job[killed_job].error and "FAILED" in by_job[killed_job].error
    assert [r.ok for r in by_job.values()].count(True) == 1  # the short cell ran
    assert "2 of 3 cells failed" in err


def test_slurm_job_over_its_time_limit_is_a_failed_record(run_suite, cluster):
    run_suite.plugin(cluster.nap)
    run_suite.write(nap_suite({"seconds": 200.0}))
    driver = run_suite.start("--executor", "slurm", "--executor-option", "time_min=1", env=cluster.env)
    out, err = driver.communicate(timeout=400)
    assert driver.returncode == 1, err
    (record,) = run_suite.records()
    assert not record.ok and "hit its time limit" in record.error, record.error
    assert record.executor == "slurm" and record.job_id


STOPPED_PLUGIN = """
import os, signal, time
from benchbench import hookimpl
from benchbench.specs import ProtocolSpec, Setting

def run(ctx):
    if ctx.settings["how"] == "fails":
        raise ValueError("a cell's own failure")
    try:  # Slurm's warning lands inside an import whose `except` swallows it and fails otherwise
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(5)
    except Exception:
        if ctx.settings["how"] == "in_import":
            raise AttributeError("module 'sympy' has no attribute 'logic'") from None
        raise
    return {}

@hookimpl
def register_protocols(register):
    register(ProtocolSpec(id="stopped", name="Stopped", run=run, accuracies=lambda s: {},
                          needs_initialised_model=False, settings={"how": Setting("in_import", str, "where")}))
"""


@pytest.mark.parametrize("how, error", [
    ("in_import", "slurm job 77 hit its time limit: Slurm's warning before the limit stopped the cell (raise the "
                  "executor option time_limit_min); the cell's error as it stopped: AttributeError: module 'sympy' has "
                  "no attribute 'logic'"),
    ("in_sleep", "slurm job 77 hit its time limit: Slurm's warning before the limit stopped the cell (raise the "
                 "executor option time_limit_min)"),
    ("fails", "ValueError: a cell's own failure"),
])
def test_a_cell_stopped_by_slurms_time_limit_warning_says_so_wherever_the_signal_landed(tmp_path, monkeypatch,
                                                                                       how, error):
    """CI once recorded a timed-out nap as "AttributeError: module 'sympy' has no attribute 'logic'":
    submitit's handler raised in the middle of a lazy import. The worker's watch of the signal names
    the time limit first, whatever the cell's error became (submitit's own handler stands in here,
    raising as it does for a job that timed out and cannot be requeued)."""
    submitit_utils = pytest.importorskip("submitit.core.utils")
    from benchbench.plugins import Plugins, load_catalog
    from benchbench.run.context import RunContext
    from benchbench.run.worker import Job
    from benchbench.store.rundir import read_records
    from benchbench.plan.suite import load_suite
    from benchbench_plugins.executors import slurm

    plugin = tmp_path / "stopped.py"
    plugin.write_text(STOPPED_PLUGIN)
    suite = tmp_path / "s.toml"
    suite.write_text(f'[suite]\nname = "s"\ndatasets = ["fashion-mnist"]\n[[group]]\nmodels = ["vit-mu7"]\n'
                     f'protocols = ["stopped"]\nsettings.stopped = {{ how = "{how}" }}\n')
    cell = load_suite(str(suite), load_catalog([plugin])).cells[0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = Job(RunContext(run_dir=run_dir, suite="s", device="cpu", executor="slurm", plugins=Plugins((str(plugin),))),
              cell)

    def submitits(signum, frame):
        raise submitit_utils.UncompletedJobError("Job not requeued because: timed-out and not checkpointable.")

    monkeypatch.setenv("SLURM_JOB_ID", "77")
    before = signal.signal(signal.SIGUSR2, submitits)
    try:
        returned = slurm.work(job)
    finally:
        signal.signal(signal.SIGUSR2, before)
    (record,) = read_records(run_dir).records
    assert not record.ok and record.error == error and returned["error"] == error
    assert record.executor == "slurm" and record.job_id == "77"


def test_a_partition_slurm_rejects_is_its_message_before_anything_is_written(run_suite, cluster, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    run_suite.write(MEASURE)
    assert run_suite.run("--executor", "slurm", "--executor-option", "partition=gpuu") == 2
    err = capsys.readouterr().err
    assert "invalid partition specified: gpuu" in err and "Traceback" not in err
    assert not run_suite.results.exists()


def test_ray_worker_killed_and_task_over_time_become_failed_records(run_suite, cluster, tmp_path):
    run_suite.plugin(cluster.nap)
    pid_file = tmp_path / "worker.pid"
    run_suite.write(nap_suite({"seconds": 120.0, "pid_file": str(pid_file)}, {"seconds": 1.0}))
    driver = run_suite.start("--executor", "ray", "--executor-option", f"address={cluster.ray_address}",
                             env=cluster.env)
    pid = int(_wait(lambda: pid_file.is_file() and pid_file.read_text().strip(), 120, "the worker's pid"))
    os.kill(pid, signal.SIGKILL)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 1, err
    records = run_suite.records()
    failed = [r for r in records if not r.ok]
    assert len(records) == 2 and len(failed) == 1
    assert "crashed" in failed[0].error and failed[0].executor == "ray"

    # A task over its time limit is cancelled and recorded; the re-run retries only the failed cell.
    pid_file.unlink()
    driver = run_suite.start("--executor", "ray", "--executor-option", f"address={cluster.ray_address}",
                             "--executor-option", "time_limit_s=20", env=cluster.env)
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 1 and "1 done, 1 to run" in err, err
    last = run_suite.records()[-1]
    assert "time limit of 20 s" in last.error and not last.ok


# --- one cell on two Slurm nodes: `cluster.sh start --nodes 2`, two slurmd on this machine -----------------


@pytest.fixture(scope="module")
def two_nodes():
    """scripts/cluster.sh's Slurm with two nodes, n0 and n1 (one slurmd each, one CPU each), in a
    private directory and on ports of its own (beside the session's cluster); stopped by PID at the end.
    The node names do not resolve here, so jobs meet at MASTER_ADDR=127.0.0.1 (as a real cluster's
    first node name would)."""
    import shutil
    import tempfile

    if shutil.which("slurmctld") is None or shutil.which("mariadbd") is None:
        pytest.skip("Slurm is not installed (scripts/ci-setup-cluster.sh installs it)")
    state = Path(tempfile.mkdtemp(prefix="bbc2-", dir="/tmp"))
    env = {**os.environ, "BENCHBENCH_CLUSTER_DIR": str(state), "BENCHBENCH_CLUSTER_PORT": "17817"}
    script = Path(__file__).resolve().parents[1] / "scripts" / "cluster.sh"
    try:
        subprocess.run(["bash", str(script), "start", "--nodes", "2"], env=env, check=True, timeout=300)
        yield {"SLURM_CONF": str(state / "slurm.conf"), "MASTER_ADDR": "127.0.0.1"}
    finally:
        subprocess.run(["bash", str(script), "stop"], env=env, timeout=120)
        shutil.rmtree(state, ignore_errors=True)  # its MariaDB data: 180 MB a session


def test_slurm_runs_a_cell_on_two_nodes_as_one_node_runs_it(run_suite, two_nodes, tmp_path, ranks):
    d = ranks
    run_suite.plugin(d.PLUGIN, "f64.py")
    run_suite.write(d.SUITE.format(name="one", model="vit-f64", devices=1, extra=""), "one.toml")
    assert run_suite.run("--results", str(tmp_path / "local")) == 0
    (local_dir,) = (tmp_path / "local").glob("*/*")
    (local,) = run_suite.records(local_dir)

    run_suite.write(d.SUITE.format(name="nodes", model="vit-f64", devices=1, extra="nodes = 2"), "nodes.toml")
    driver = run_suite.start("--executor", "slurm", env=two_nodes)
    out, err = driver.communicate(timeout=900)
    assert driver.returncode == 0, err
    (record,) = run_suite.records()  # one record: the job's first task's
    assert record.ok and record.executor == "slurm" and record.job_id, record.error
    assert d.max_diff(d.weights(local_dir), d.weights(run_suite.run_dir)) < 1e-12
    for key in d.SAME_METRICS:
        assert record.metrics[key] == local.metrics[key], key
    assert record.devices == 2
    acct = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "NNodes,NodeList,State", "-j", record.job_id],
                          capture_output=True, text=True, env=run_suite.env(two_nodes), check=True)
    assert acct.stdout.split() == ["2|n[0-1]|COMPLETED"]  # the job held both nodes


def test_ray_with_a_relative_results_folder_records_every_cell(run_suite, cluster, tmp_path):
    """`--results` relative to the directory the command runs in (the default, runs/, is): the driver hands
    its workers absolute paths, so on the real Ray head (whose workers run in a directory of their own)
    every cell lands in the run directory the driver names."""
    run_suite.write(MEASURE)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    argv = [str(run_suite.exe), "run", run_suite.suite, "--results", "rel", "--data-root", str(run_suite.data),
            "--device", "cpu", "--no-progress", "--executor", "ray", "--executor-option",
            f"address={cluster.ray_address}"]
    proc = subprocess.run(argv, cwd=cwd, env=run_suite.env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (cwd / "rel").glob("*/*")
    records = run_suite.records(run_dir)
    assert len(records) == 2 and all(r.ok and r.executor == "ray" for r in records), [r.error for r in records]
