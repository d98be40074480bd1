"""CPU threads that fit what this process may use, and how OpenMP's idle threads wait.

torch sizes its intra-op pool by the host's cores, and its OpenMP library (libgomp in the Linux
wheels) spins at every barrier for a while before sleeping. On a shared or CPU-limited machine both
go wrong: a thread spinning for a partner that the scheduler has swapped out wastes the time slice
that partner needs, and a step of a small model has thousands of barriers. Measured on 2 cores with
two busy processes beside it (benchmarks/threads_under_load.py), torch's defaults trained ViT-Mu/7 at
24 img/s against 1,656 with one thread. So:

- **How many threads** (`budget`): the fewest of the CPUs this process may run on (its affinity),
  its cgroup's CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`, the tightest of its cgroup and the
  cgroup's ancestors), and the scheduler's allocation (`SLURM_CPUS_PER_TASK`; a Ray task's
  `num_cpus`, given by the executor). An explicit `--threads` or `OMP_NUM_THREADS` wins.
- **Never the load of others** for work whose numbers depend on the thread count (`computing`,
  `apply`: a cell, a profile). The thread count changes the order of floating-point sums, hence the
  numbers a model computes: a count taken from the momentary load made the same suite and seed give
  88.46 % top-1 on a loaded machine and 88.81 % on an idle one. So the count is the budget, whatever
  the load, and stays so for the whole of the work; others' load costs speed, not reproducibility
  (`--threads` remains the lever: `--threads 1` beside busy processes).
- **Free CPUs** (`choose`, `LoadWatch`), for work whose results do not depend on how many CPUs do it
  (processes reading runs for `db ingest`): where the process may use every CPU of the machine, a
  watcher samples the kernel's count of runnable threads (minus this process's own) every SAMPLE_S,
  and the budget less a CPU per CPU others keep busy is free. Under a quota or an allocation the
  machine's run queue says nothing about this process's share, and the watcher stays off.
- **How idle threads wait** (`prepare_environment`): libgomp spins GOMP_SPINCOUNT times (300,000 by
  default) before it sleeps. 3,000 kept 0.97x of the idle speed of the default spin, and bounds what
  a busy machine costs the fixed count; `OMP_WAIT_POLICY=PASSIVE` (no spin) lost 46 % idle.
  libgomp reads the variable once, when torch loads it: `benchbench/__init__.py` calls this first
  thing, before anything imports torch. An `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` already set is kept.

Thread counts are process-wide in torch, so this module keeps the one decision of the process (and
its watcher) as module state. Standard library only: it runs before torch is imported.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Mapping

SPINCOUNT = "3000"  # libgomp's spins before an idle thread sleeps (see the module docstring)
POLICY_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CGROUP_ROOT = Path("/sys/fs/cgroup")
SAMPLE_S = 0.1  # the load watcher's sampling interval (a sample reads /proc: about 0.3 ms)
WINDOW = 20  # samples the load is averaged over (2 s)
SETTLE_SAMPLES = 5  # a decision waits for this many samples of a watcher just started
# Others must keep this much of a CPU busy, on average, to take a CPU away: one runnable kernel
# thread or a process exiting in a short window must not (seen idle: a mean of 0.5 over two samples).
TAKES_A_THREAD = 0.75


# --- the wait policy, before torch is imported -----------------------------------------------------------

MARKER = "BENCHBENCH_SET_GOMP_SPINCOUNT"  # tells child processes that benchbench, not the user, set the spin
_policy: dict[str, str] = {}


def policy_for(environ: Mapping[str, str]) -> tuple[str, str, dict[str, str]]:
    """(the wait policy in words, who chose it, the variables to set for it) in an environment."""
    given = {k: environ[k] for k in POLICY_VARIABLES if k in environ}
    if not given:
        return f"GOMP_SPINCOUNT={SPINCOUNT}", "benchbench", {"GOMP_SPINCOUNT": SPINCOUNT, MARKER: SPINCOUNT}
    ours = list(given) == ["GOMP_SPINCOUNT"] and environ.get(MARKER) == given["GOMP_SPINCOUNT"]
    return " ".join(f"{k}={v}" for k, v in given.items()), "benchbench" if ours else "environment", {}


def prepare_environment() -> None:
    """Set libgomp's spin count in this process's environment (its children inherit it) unless the
    environment chose a wait policy. Once per process; it has effect only if torch is not imported yet."""
    if _policy:
        return
    policy, source, variables = policy_for(os.environ)
    late = bool(variables) and "torch" in sys.modules  # torch's OpenMP library has read its variables
    os.environ.update(variables)
    _policy.update(policy=policy, source=source, late="torch was imported before benchbench" if late else "")


def wait_policy() -> str:
    """How idle OpenMP threads wait in this process, and who chose it."""
    prepare_environment()
    text = f"{_policy['policy']} ({_policy['source']})"
    return f"{text}, not applied: {_policy['late']}" if _policy["late"] else text


# --- how many CPUs this process may use -------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """The CPUs this process may keep busy, and the limit that set the number (in words)."""

    cpus: int
    source: str
    # True where the budget is the CPUs of the whole machine: the run queue then tells others' load.
    whole_machine: bool = False


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _ancestors(relative: str) -> list[str]:
    """'/a/b' -> ['/a/b', '/a', '/']: a cgroup and its ancestors, each of which may cap it."""
    parts = [p for p in relative.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> tuple[float, str] | None:
    """(CPUs, file) of the tightest CPU quota over this process's cgroup and its ancestors, v2
    (`cpu.max`: "QUOTA PERIOD" or "max PERIOD") or v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`, -1:
    none); None without one. `root` is where cgroups are mounted and `proc_cgroup` the text of
    /proc/self/cgroup, so a test can point both at files it made."""
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    found: list[tuple[float, str]] = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2, the unified hierarchy
            bases = [root] if (root / "cgroup.controllers").exists() else [root / "unified"]
            for base in bases:
                for group in _ancestors(relative):
                    path = base / group.lstrip("/") / "cpu.max"
                    quota, _, period = (_read(path) or "").strip().partition(" ")
                    if quota and quota != "max" and period:
                        found.append((int(quota) / int(period), str(path)))
        elif "cpu" in controllers.split(","):  # v1: the hierarchy holding the cpu controller
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                base = root / mount
                if not base.is_dir():
                    continue
                for group in _ancestors(relative):
                    folder = base / group.lstrip("/")
                    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
                    if quota and period and int(quota) > 0 and int(period) > 0:
                        found.append((int(quota) / int(period), str(folder / "cpu.cfs_quota_us")))
                break
    return min(found) if found else None


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def budget(*, environ: Mapping[str, str] = os.environ, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None,
           allocated: float | None = None, allocated_by: str = "") -> Budget:
    """The fewest of: the CPUs in this process's affinity, its cgroup quota (rounded down, at least 1),
    `SLURM_CPUS_PER_TASK` inside a Slurm job, and `allocated` (an executor's grant, named by
    `allocated_by`, e.g. "ray num_cpus")."""
    cpus = _affinity()
    limits: list[tuple[float, str]] = [(cpus, f"affinity: {cpus} CPU{'' if cpus == 1 else 's'}")]
    quota = cgroup_quota(root, proc_cgroup)
    if quota is not None:
        limits.append((quota[0], f"cgroup quota of {quota[0]:g} CPU{'' if quota[0] == 1 else 's'} ({quota[1]})"))
    slurm = environ.get("SLURM_CPUS_PER_TASK", "")
    if environ.get("SLURM_JOB_ID") and slurm.isdigit() and int(slurm) > 0:
        limits.append((int(slurm), f"SLURM_CPUS_PER_TASK={slurm}"))
    if allocated is not None and allocated > 0:
        limits.append((allocated, f"{allocated_by or 'allocation'} {allocated:g}"))
    value, source = min(limits, key=lambda limit: limit[0])
    whole = source == limits[0][1] and cpus >= (os.cpu_count() or cpus)
    return Budget(max(1, math.floor(value)), source, whole_machine=whole)


def explicit_threads(environ: Mapping[str, str] = os.environ) -> int | None:
    """OMP_NUM_THREADS as a positive integer, or None (unset, or not a number OpenMP would take)."""
    text = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


# --- the load of other processes -------------------------------------------------------------------------


def _running() -> tuple[int, int] | None:
    """(runnable threads on the machine, runnable threads of this process), or None off Linux."""
    stat = _read(Path("/proc/stat"))
    if stat is None:
        return None
    machine = next((int(line.split()[1]) for line in stat.splitlines() if line.startswith("procs_running")), None)
    if machine is None:
        return None
    ours = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        text = _read(Path("/proc/self/task", tid, "stat"))
        if text and text[text.rfind(")") + 2:text.rfind(")") + 3] == "R":
            ours += 1
    return machine, ours


class LoadWatch:
    """A daemon thread that samples how many threads of other processes are runnable, every
    SAMPLE_S; `others()` is their mean over the last WINDOW samples (None before two)."""

    def __init__(self, sample=_running, interval_s: float = SAMPLE_S, window: int = WINDOW):
        self._sample, self._interval = sample, interval_s
        self._samples: deque[int] = deque(maxlen=window)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="benchbench-load", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            got = self._sample()
            if got is None:
                return
            machine, ours = got
            self._samples.append(max(0, machine - ours))
            self._stop.wait(self._interval)

    def others(self, settle_s: float = 0.0) -> float | None:
        """Others' runnable threads, averaged; waits up to `settle_s` for SETTLE_SAMPLES samples."""
        deadline = time.monotonic() + settle_s
        while len(self._samples) < SETTLE_SAMPLES and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        samples = list(self._samples)
        return sum(samples) / len(samples) if len(samples) >= 2 else None

    def stop(self) -> None:
        self._stop.set()


# --- the process's decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threads:
    """How many intra-op threads this process computes with, and why (recorded in env and records)."""

    threads: int
    budget: int
    source: str  # what set `budget` or, when explicit, `threads`
    policy: str  # how idle OpenMP threads wait (wait_policy)
    others_load: float | None = None  # other processes' runnable threads, where `choose` took them into account

    def env(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Decision:
    explicit: tuple[int, str] | None  # (threads, what set them)
    budget: Budget
    watch_load: bool  # the budget is the whole machine: its run queue tells others' load (for `choose`)


_decision: _Decision | None = None
_watch: LoadWatch | None = None  # one per process, started when first needed, never stopped
_lock = threading.Lock()


def configure(threads: int | None = None, *, source: str | None = None, allocated: float | None = None,
              allocated_by: str = "", watch: bool = True) -> None:
    """Decide this process's thread budget: `threads` (--threads, or a rank's share, named by
    `source`), else OMP_NUM_THREADS, else `budget`; `choose` may watch the load of others where the
    budget is the whole machine (and `watch`). Imports no torch: `apply` sets the threads when work
    starts. Calling it again replaces the decision (a worker told its allocation)."""
    global _decision
    env_threads = explicit_threads()
    explicit = ((threads, source or f"--threads {threads}") if threads is not None else
                (env_threads, f"OMP_NUM_THREADS={env_threads}") if env_threads is not None else None)
    found = budget(allocated=allocated, allocated_by=allocated_by)
    _decision = _Decision(explicit, found, watch and explicit is None and found.whole_machine and found.cpus > 1)


def _reset_after_fork() -> None:
    global _watch
    _watch = None  # its thread did not survive the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _watcher() -> LoadWatch:
    global _watch
    with _lock:
        if _watch is None:
            _watch = LoadWatch()
        return _watch


def computing() -> Threads:
    """The thread count of work whose numbers depend on it (a cell, a profile): the explicit count,
    else the budget. Never the load of other processes: the same work gives the same numbers on an
    idle machine and a busy one."""
    if _decision is None:
        configure()
    decision = _decision
    if decision.explicit is not None:
        count, source = decision.explicit
        return Threads(count, count, source, wait_policy())
    return Threads(decision.budget.cpus, decision.budget.cpus, decision.budget.source, wait_policy())


def choose(settle_s: float = 1.0) -> Threads:
    """The CPUs free now for work whose results do not depend on how many do it (processes reading
    runs): the explicit count, else the budget less the runnable threads of other processes (rounded,
    at least 1). A watcher started just now gets up to `settle_s` for its first samples. Not for
    computing threads: `computing`."""
    chosen = computing()
    if _decision.explicit is not None or not _decision.watch_load:
        return chosen
    others = _watcher().others(settle_s)
    if others is None:
        return chosen
    return replace(chosen, threads=_for_load(chosen.budget, others), others_load=round(others, 2))


_used: set[int] = set()  # thread counts used since the last `apply`


def apply() -> Threads:
    """`computing`, then torch's intra-op threads set to it (inter-op once, the first time: torch
    allows it only before its first parallel work). Call where a piece of work starts (a cell, a
    profile); `used()` then tells the counts it ran with."""
    import torch

    chosen = computing()
    if torch.get_num_threads() != chosen.threads:
        torch.set_num_threads(chosen.threads)
    _interop_once(chosen.budget)
    _used.clear()
    _used.add(chosen.threads)
    return chosen


def used() -> list[int]:
    """The thread counts work has run with since the last `apply`, as torch says now: one, unless
    something set torch's count in between."""
    torch = sys.modules.get("torch")
    if torch is not None:
        _used.add(torch.get_num_threads())
    return sorted(_used)


def _for_load(cpus: int, others: float) -> int:
    """The budget less a CPU for each CPU others keep busy (TAKES_A_THREAD of one counts), at least 1."""
    return max(1, min(cpus, cpus - math.floor(others + 1 - TAKES_A_THREAD)))


_interop_set = False


def _interop_once(count: int) -> None:
    global _interop_set
    if _interop_set:
        return
    _interop_set = True
    import torch

    try:
        torch.set_num_interop_threads(count)
    except RuntimeError:  # inter-op work already ran; torch keeps its pool
        pass


def per_rank(ranks: int) -> int:
    """Threads for each of `ranks` processes of one cell on this node: the budget shared out."""
    chosen = computing()
    return max(1, chosen.budget // max(1, ranks))


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def overload_warning(load: list[float] | None = None, cpus: Budget | None = None) -> str | None:
    """A warning when the 1-minute load average says other processes compete for the CPUs a run uses,
    else None. The load average counts the whole machine: it is compared with the run's CPUs where
    they are the whole machine, and with the machine's CPUs where an affinity, quota or allocation
    gives the run fewer (others' load then reaches them only when the machine itself is oversubscribed)."""
    load = load_average() if load is None else load
    cpus = budget() if cpus is None else cpus
    if not load:
        return None
    limit = cpus.cpus if cpus.whole_machine else (os.cpu_count() or cpus.cpus)
    if load[0] <= limit:
        return None
    return (f"the load average is {load[0]:g} on {limit} CPU{'' if limit == 1 else 's'} ({cpus.source}): other "
            "processes compete for them, so timings, throughput and time estimates will be inflated, "
            "perhaps many times (figures meant for publication want an idle machine)")
