"""CPU threads (benchbench.runtime.threads): the budget from affinity, cgroup quotas and the scheduler's
allocation; the load of other processes; the OpenMP wait policy set before torch loads; and what
records, env.json and `profile` say of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchbench.runtime import threads
SPIN = threads.SPINCOUNT
CLEAN = ("OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", threads.MARKER)


def _child(code: str, extra_env: dict | None = None, preexec_fn=None) -> str:
    """`code` in a fresh interpreter, in an environment without thread settings (plus `extra_env`); its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={**env, **(extra_env or {})}, preexec_fn=preexec_fn)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


BUDGET = "from benchbench.runtime import threads; b = threads.budget(); print(b.cpus, '|', b.source)"


# --- the budget ---------------------------------------------------------------------------------------------


def test_affinity_of_one_cpu_gives_one_thread():
    cpu = min(os.sched_getaffinity(0))
    out = _child(BUDGET, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert out == "1 | affinity: 1 CPU"


def test_taskset_gives_its_cpus():
    taskset = "/usr/bin/taskset"
    if not Path(taskset).exists():
        pytest.skip("no taskset here (util-linux)")
    cpus = sorted(os.sched_getaffinity(0))
    proc = subprocess.run([taskset, "-c", str(cpus[0]), sys.executable, "-c", BUDGET], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k not in CLEAN}, timeout=120)
    assert proc.stdout.strip() == "1 | affinity: 1 CPU", proc.stderr


def _v2_tree(root: Path, quotas: dict[str, str]) -> None:
    """A cgroup v2 mount under `root`: cpu.max in the named groups ("/" is the root)."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for group, text in quotas.items():
        folder = root / group.lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(text + "\n")


def test_cgroup_v2_quota(tmp_path):
    _v2_tree(tmp_path, {"/": "max 100000", "/jobs": "max 100000", "/jobs/one": "150000 100000"})
    assert threads.cgroup_quota(tmp_path, "0::/jobs/one\n") == (1.5, str(tmp_path / "jobs/one/cpu.max"))
    b = threads.budget(root=tmp_path, proc_cgroup="0::/jobs/one\n", environ={})
    assert b.cpus == 1 and "cgroup quota of 1.5 CPUs" in b.source and not b.whole_machine


def test_cgroup_v2_the_tightest_ancestor_holds(tmp_path):
    _v2_tree(tmp_path, {"/": "max 100000", "/jobs": "100000 100000", "/jobs/one": "400000 100000"})
    assert threads.cgroup_quota(tmp_path, "0::/jobs/one\n") == (1.0, str(tmp_path / "jobs/cpu.max"))


def test_cgroup_v2_without_quota(tmp_path):
    _v2_tree(tmp_path, {"/": "max 100000", "/a": "max 100000"})
    assert threads.cgroup_quota(tmp_path, "0::/a\n") is None


def test_cgroup_v1_quota(tmp_path):
    for mount in ("cpu,cpuacct",):
        folder = tmp_path / mount / "docker" / "abc"
        folder.mkdir(parents=True)
        (folder / "cpu.cfs_quota_us").write_text("200000\n")
        (folder / "cpu.cfs_period_us").write_text("100000\n")
        (tmp_path / mount / "cpu.cfs_quota_us").write_text("-1\n")
        (tmp_path / mount / "cpu.cfs_period_us").write_text("100000\n")
    text = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    assert threads.cgroup_quota(tmp_path, text) == (2.0, str(tmp_path / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us"))
    assert threads.budget(root=tmp_path, proc_cgroup=text, environ={}).cpus == min(2, len(os.sched_getaffinity(0)))


def test_cgroup_v1_no_quota_is_none(tmp_path):
    folder = tmp_path / "cpu"
    folder.mkdir()
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_quota(tmp_path, "3:cpu:/\n") is None


def test_a_quota_below_one_cpu_still_gives_one_thread(tmp_path):
    _v2_tree(tmp_path, {"/": "50000 100000"})
    assert threads.budget(root=tmp_path, proc_cgroup="0::/\n", environ={}).cpus == 1


def _cpu_cgroup() -> tuple[Path, str] | None:
    """A real cgroup this test may create with a CPU quota: (folder, quota file), or None."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return v1, "cpu.cfs_quota_us"
    v2 = Path("/sys/fs/cgroup")
    if "cpu" in (v2 / "cgroup.subtree_control").read_text().split() if (v2 / "cgroup.subtree_control").exists() \
            else False:
        return v2, "cpu.max"
    return None


def test_a_real_cgroup_quota_gives_its_cpus():
    found = _cpu_cgroup()
    if found is None or os.geteuid() != 0:
        pytest.skip("no writable cgroup with the cpu controller here (needs root and a cgroup v1 cpu or v2 "
                    "hierarchy with cpu in cgroup.subtree_control)")
    base, quota_file = found
    group = base / f"benchbench-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup under {base}: {exc.strerror}")
    try:
        (group / quota_file).write_text("100000" if quota_file == "cpu.cfs_quota_us" else "100000 100000")
        procs = group / "cgroup.procs"
        out = _child(BUDGET, preexec_fn=lambda: procs.write_text(str(os.getpid())))
    finally:
        group.rmdir()
    assert out.startswith("1 | cgroup quota of 1 CPU"), out


def test_slurm_allocation_counts_inside_a_job():
    job = {"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "1"}
    assert threads.budget(environ=job, proc_cgroup="") == threads.Budget(1, "SLURM_CPUS_PER_TASK=1")
    assert threads.budget(environ={"SLURM_CPUS_PER_TASK": "1"}, proc_cgroup="").source.startswith("affinity")


def test_an_executors_allocation_counts():
    b = threads.budget(environ={}, proc_cgroup="", allocated=1.0, allocated_by="ray num_cpus")
    assert (b.cpus, b.source, b.whole_machine) == (1, "ray num_cpus 1", False)


def test_the_whole_machine_is_told_apart():
    whole = len(os.sched_getaffinity(0)) >= (os.cpu_count() or 1)
    assert threads.budget(environ={}, proc_cgroup="").whole_machine == whole


def test_explicit_omp_num_threads():
    assert threads.explicit_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert threads.explicit_threads({"OMP_NUM_THREADS": "4,2"}) == 4  # OpenMP's nested list: the outer level
    for text in ("", "0", "x", "-2"):
        assert threads.explicit_threads({"OMP_NUM_THREADS": text}) is None


# --- the decision -------------------------------------------------------------------------------------------


@pytest.fixture
def decision():
    """The process's decision restored after the test."""
    saved = threads._decision
    yield
    threads._decision = saved


def test_threads_option_wins_over_omp_num_threads(decision, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    threads.configure()
    assert (threads.choose().threads, threads.choose().source) == (3, "OMP_NUM_THREADS=3")
    threads.configure(5)
    chosen = threads.choose()
    assert (chosen.threads, chosen.budget, chosen.source, chosen.others_load) == (5, 5, "--threads 5", None)


def test_free_cpus_are_the_budget_less_the_load_of_others(decision, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "budget", lambda **kw: threads.Budget(4, "affinity: 4 CPUs", whole_machine=True))
    threads.configure()
    for others, expect in ((0.0, 4), (0.5, 4), (0.8, 3), (1.0, 3), (2.6, 2), (2.8, 1), (9.0, 1)):
        monkeypatch.setattr(threads, "_watch", _Fixed(others))
        chosen = threads.choose()
        assert (chosen.threads, chosen.budget, chosen.others_load) == (expect, 4, others), others


def test_the_computing_threads_never_follow_the_load(decision, monkeypatch):
    """The count that changes a model's numbers is the budget, idle or loaded, before and during the work."""
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "budget", lambda **kw: threads.Budget(2, "affinity: 2 CPUs", whole_machine=True))
    watch = _Fixed(0.0)
    monkeypatch.setattr(threads, "_watch", watch)
    before = torch.get_num_threads()
    try:
        threads.configure()
        for others in (0.0, 1.5, 9.0):
            watch.value = others
            chosen = threads.apply()
            assert (chosen.threads, chosen.others_load, torch.get_num_threads(), threads.used()) == (2, None, 2, [2])
        assert not hasattr(threads, "follow_load")  # nothing changes the count between batches
        torch.set_num_threads(1)  # something else changing it is seen in the record
        assert threads.used() == [1, 2]
        threads.configure(1)  # an explicit count wins
        assert threads.apply().threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_load_is_not_followed_under_a_quota_or_allocation(decision, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "budget", lambda **kw: threads.Budget(2, "SLURM_CPUS_PER_TASK=2"))
    monkeypatch.setattr(threads, "_watch", _Fixed(5.0))
    threads.configure()
    assert (threads.choose().threads, threads.choose().others_load) == (2, None)


class _Fixed:
    def __init__(self, others):
        self.value = others

    def others(self, settle_s=0.0):
        return self.value


def test_the_watcher_counts_other_processes_runnable_threads():
    samples = iter([(5, 2), (3, 1), (4, 4), (2, 3), None])  # (machine, ours); None: no /proc, it stops
    watch = threads.LoadWatch(sample=lambda: next(samples), interval_s=0.001, window=4)
    watch._thread.join(10)
    assert list(watch._samples) == [3, 2, 0, 0]  # fewer runnable than our own (sampled apart) counts as none
    assert watch.others() == 1.25


def test_the_watcher_says_nothing_before_two_samples():
    watch = threads.LoadWatch(sample=lambda: None)
    assert watch.others(settle_s=0.1) is None


def test_the_watcher_sees_a_busy_process():
    if threads._running() is None:
        pytest.skip("no /proc/stat here")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = threads.LoadWatch(interval_s=0.05, window=10)
        time.sleep(0.8)
        others = watch.others()
        watch.stop()
    finally:
        busy.kill()
        busy.wait()
    assert others is not None and others >= 0.8  # the busy loop (and whatever else runs here)


def test_per_rank_shares_the_budget(decision):
    threads.configure(4)
    assert (threads.per_rank(2), threads.per_rank(3), threads.per_rank(8)) == (2, 1, 1)


# --- the wait policy ----------------------------------------------------------------------------------------


def test_policy_for_an_environment():
    assert threads.policy_for({}) == (f"GOMP_SPINCOUNT={SPIN}", "benchbench",
                                      {"GOMP_SPINCOUNT": SPIN, threads.MARKER: SPIN})
    assert threads.policy_for({"OMP_WAIT_POLICY": "PASSIVE"}) == ("OMP_WAIT_POLICY=PASSIVE", "environment", {})
    assert threads.policy_for({"GOMP_SPINCOUNT": "5"})[1] == "environment"
    inherited = {"GOMP_SPINCOUNT": SPIN, threads.MARKER: SPIN}  # a child of a benchbench process
    assert threads.policy_for(inherited) == (f"GOMP_SPINCOUNT={SPIN}", "benchbench", {})


def test_importing_benchbench_sets_the_spin_before_torch_loads():
    out = _child("""
        import os, sys
        import benchbench
        from benchbench.runtime import threads
        print(os.environ["GOMP_SPINCOUNT"], "torch" in sys.modules, threads.wait_policy(), sep="|")
        """)
    assert out == f"{SPIN}|False|GOMP_SPINCOUNT={SPIN} (benchbench)"


def test_a_users_wait_policy_is_kept():
    out = _child("import os, benchbench; from benchbench.runtime import threads; print(os.environ.get('GOMP_SPINCOUNT'), "
                 "threads.wait_policy(), sep='|')", {"OMP_WAIT_POLICY": "PASSIVE"})
    assert out == "None|OMP_WAIT_POLICY=PASSIVE (environment)"


def test_torch_imported_first_is_said():
    out = _child("import torch, benchbench; from benchbench.runtime import threads; print(threads.wait_policy())")
    assert out == f"GOMP_SPINCOUNT={SPIN} (benchbench), not applied: torch was imported before benchbench"


# --- what is recorded ---------------------------------------------------------------------------------------


def test_records_and_env_json_carry_threads_and_load(run_suite, tiny_suite):
    run_suite.suite = str(tiny_suite)
    assert run_suite.run("--threads", "1") == 0
    for record in run_suite.records():
        assert record.env["threads"] == {"threads": 1, "budget": 1, "source": "--threads 1",
                                         "policy": threads.wait_policy(), "others_load": None, "used": [1]}
        assert record.env["device_name"].endswith("(1 thread)")
    env = json.loads((run_suite.run_dir / "env.json").read_text())
    assert env["threads"]["threads"] == 1 and env["threads"]["policy"] == threads.wait_policy()
    for key in ("load_average_start", "load_average_end"):
        assert len(env[key]) == 3 and all(x >= 0 for x in env[key]), key


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_profile_says_its_threads(run_suite):
    proc = run_suite.cli("profile", "vit-mu7", "--device", "cpu", "--mode", "train", "--batch-size", "8",
                         "--min-steps", "2", "--min-seconds", "0", "--warmup-steps", "1", "--json", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert (row["threads"], row["threads_budget"], row["threads_source"]) == (1, 1, "--threads 1")
    assert row["omp_wait_policy"] == f"GOMP_SPINCOUNT={SPIN} (benchbench)" and row["device_name"].endswith("(1 thread)")
    text = run_suite.cli("profile", "vit-mu7", "--device", "cpu", "--batch-size", "8", "--min-steps", "2",
                         "--min-seconds", "0", "--warmup-steps", "1", env={"OMP_NUM_THREADS": "1"})
    assert text.returncode == 0, text.stderr
    assert f"threads       1 of 1 (OMP_NUM_THREADS=1); idle threads: GOMP_SPINCOUNT={SPIN} (benchbench)" in text.stdout


def test_threads_option_is_checked(run_suite):
    proc = run_suite.cli("list", "models", "--threads", "0")
    assert proc.returncode == 2 and "--threads: must be at least 1, got 0" in proc.stderr


def test_an_overloaded_machine_is_said_to_inflate_timings(monkeypatch):
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    whole = threads.Budget(2, "affinity: 2 CPUs", whole_machine=True)
    assert threads.overload_warning([1.9, 1.0, 1.0], whole) is None
    said = threads.overload_warning([4.5, 3.0, 1.0], whole)
    assert said.startswith("the load average is 4.5 on 2 CPUs (affinity: 2 CPUs)") and "inflated" in said
    # a run given 2 of the machine's 64 CPUs: others' load reaches it only past the machine's 64
    slurm = threads.Budget(2, "SLURM_CPUS_PER_TASK=2")
    assert threads.overload_warning([40.0, 1.0, 1.0], slurm) is None
    assert "on 64 CPUs (SLURM_CPUS_PER_TASK=2)" in threads.overload_warning([70.0, 1.0, 1.0], slurm)
    assert threads.overload_warning([], whole) is None  # no load average on this system


def test_the_same_cell_gives_the_same_numbers_idle_or_loaded(decision, run_suite, monkeypatch):
    """A training cell run beside no other process and beside nine busy threads: bit-identical
    predictions (the thread count, which orders the float sums, is the budget either way; it was 1 of
    2 under that load, whose numbers differ)."""
    import numpy as np

    from benchbench.store import predictions
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "budget", lambda **kw: threads.Budget(2, "affinity: 2 CPUs", whole_machine=True))
    run_suite.write("""
        [suite]
        name = "load"
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["scratch"]
        [settings.scratch]
        steps = 3
        batch_size = 32
    """)
    for others in (0.0, 9.0):
        monkeypatch.setattr(threads, "_watch", _Fixed(others))
        assert run_suite.run("--fresh") == 0
    (idle, loaded) = [(d, run_suite.records(d)[0]) for d in run_suite.run_dirs()]
    assert [r.env["threads"]["threads"] for _, r in (idle, loaded)] == [2, 2]
    assert idle[1].metrics["top1"] == loaded[1].metrics["top1"]
    a, b = (predictions.load(d, r.predictions, r.key) for d, r in (idle, loaded))
    assert np.array_equal(a.p_true, b.p_true) and np.array_equal(a.top5, b.top5)
