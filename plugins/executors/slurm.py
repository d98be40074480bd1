"""Executor `slurm`: one Slurm job per cell, submitted through submitit; needs `benchbench[slurm]`.

The worker (on whichever node Slurm picks) runs the cell and appends its record itself. The driver
submits at most `--max-parallel` jobs at a time, writes each job id to the run's journal, and polls
`sacct` (submitit needs Slurm accounting too) for the jobs in flight: a job that ended without its
record becomes a failed record carrying Slurm's state (TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY,
a crashed worker). A driver that died leaves the journal: the next run re-attaches to the jobs it
names that have no record yet, whatever their state, and submits only the cells without a job.

A cell on several nodes (setting `nodes` > 1) gets a job of that many nodes, one task per node: each
task is the node's launcher (its ranks meet through Slurm's variables, benchbench.runtime.rendezvous), and
the first task alone appends the record.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.store.record import Record
from benchbench.run.dispatch import Dispatch
from benchbench.run.worker import Job, execute
from benchbench.settings import non_negative, positive
from benchbench.store.shared import recorded_jobs
from benchbench.specs import ExecutorSpec, Setting

OPTIONS = {
    "partition": Setting("", str, "the partition (sbatch --partition); empty: the cluster's default"),
    "account": Setting("", str, "the account to charge (sbatch --account)"),
    "qos": Setting("", str, "quality of service (sbatch --qos)"),
    "constraint": Setting("", str, "node features required (sbatch --constraint)"),
    "time_limit_min": Setting(60, int, "each cell's time limit in minutes (Slurm counts whole minutes; "
                              "time_min is accepted for it)", positive),
    "cpus_per_cell": Setting(1, int, "CPUs per cell (per task)", positive),
    "gpus_per_cell": Setting(0, int, "GPUs per cell (per node)", non_negative),
    "mem_gb": Setting(0, int, "memory per cell in GB; 0: the partition's default", non_negative),
    # A cell's own `nodes` setting (> 1) overrides these two: its job has that many nodes, one task each.
    "nodes": Setting(1, int, "nodes per cell (a cell with its own nodes > 1 gets that many)", positive),
    "tasks_per_node": Setting(1, int, "tasks per node (a cell on several nodes: one, its launcher)", positive),
    "sbatch_args": Setting("", str, "extra sbatch arguments, e.g. \"--exclusive --reservation=r1\""),
    "requeue": Setting(True, bool, "let Slurm requeue a preempted job (the record counts its attempts)"),
    "poll_s": Setting(1.0, float, "seconds between the driver's sacct polls", positive),
}

RUNNING = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING",
           "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED"}
REASONS = {
    "TIMEOUT": "hit its time limit",
    "CANCELLED": "was cancelled",
    "NODE_FAIL": "ended by a node failure",
    "OUT_OF_MEMORY": "was killed for running out of memory",
    "PREEMPTED": "was preempted and not requeued",
    "BOOT_FAIL": "could not boot its node",
    "DEADLINE": "missed its deadline",
    "FAILED": "crashed: the worker died before writing the cell's record",
    "COMPLETED": "ended without writing the cell's record",
}


def split_args(text: str) -> list[str]:
    """sbatch_args as the shell would split them; an unbalanced quote is one line naming the option."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise BenchError(f"executor option sbatch_args = {text!r}: {exc} (an unbalanced quote); quote each value "
                         "whole, e.g. --comment='two words'") from None


def _sbatch_extra(text: str) -> dict:
    """"--exclusive --reservation=r1" -> {"exclusive": True, "reservation": "r1"} (submitit's form)."""
    out: dict = {}
    for arg in split_args(text):
        if not arg.startswith("--"):
            raise BenchError(f"executor option sbatch_args: {arg!r}: write long options, e.g. --reservation=r1")
        key, sep, value = arg[2:].partition("=")
        out[key.replace("-", "_")] = value if sep else True
    return out


def _parameters(options) -> dict:
    """submitit's SlurmExecutor parameters for the options."""
    params = dict(time=options["time_limit_min"], nodes=options["nodes"], ntasks_per_node=options["tasks_per_node"],
                  cpus_per_task=options["cpus_per_cell"], signal_delay_s=30)
    if options["gpus_per_cell"]:
        params["gpus_per_node"] = options["gpus_per_cell"]
    if options["mem_gb"]:
        params["mem"] = f"{options['mem_gb']}G"
    for name in ("partition", "account", "qos", "constraint"):
        if options[name]:
            params[name] = options[name]
    extra = _sbatch_extra(options["sbatch_args"])
    if options["requeue"]:
        extra.setdefault("requeue", True)
    if extra:
        params["additional_parameters"] = extra
    return params


def _for_cell(params: dict, cell) -> dict:
    """The job's parameters for one cell: a cell on several nodes gets them, one task (launcher) each."""
    nodes = cell.choices.world.nodes
    return params if nodes <= 1 else {**params, "nodes": nodes, "ntasks_per_node": 1}


def _test_args(options) -> list[str]:
    """The same request as sbatch flags, for `sbatch --test-only` (validated, nothing submitted)."""
    flags = [f"--time={options['time_limit_min']}", f"--nodes={options['nodes']}",
             f"--ntasks-per-node={options['tasks_per_node']}", f"--cpus-per-task={options['cpus_per_cell']}"]
    if options["gpus_per_cell"]:
        flags.append(f"--gpus-per-node={options['gpus_per_cell']}")
    if options["mem_gb"]:
        flags.append(f"--mem={options['mem_gb']}G")
    flags += [f"--{name}={options[name]}" for name in ("partition", "account", "qos", "constraint") if options[name]]
    flags += split_args(options["sbatch_args"])
    return flags


def _run(command: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"executor slurm: `{' '.join(command)}` did not answer in {timeout:.0f} s; is the "
                         "Slurm controller reachable?") from None


def _first_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return next((line for line in lines if "error" in line.lower()), lines[0] if lines else f"exit {proc.returncode}")


def states(job_ids) -> dict[str, tuple[str, str, int]]:
    """{job id: (state, node list, signal)} from sacct, for jobs accounting knows (an unknown id is
    absent). signal: the one that ended the job's step that ended worst (DerivedExitCode's part after
    the colon), 0 for none."""
    if not job_ids:
        return {}
    proc = _run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,NodeList,DerivedExitCode", "-j", ",".join(job_ids)])
    if proc.returncode != 0:
        raise BenchError(f"executor slurm: sacct failed: {_first_error(proc)}")
    out = {}
    for line in proc.stdout.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) >= 3:
            _, _, signum = (parts[3] if len(parts) > 3 else "").partition(":")
            out[parts[0]] = (parts[1], parts[2], int(signum) if signum.isdigit() else 0)
    return out


def warning_signal() -> int:
    """The signal submitit asks Slurm to send before a job's time limit (SIGUSR2)."""
    from submitit.slurm.slurm import SlurmJobEnvironment

    return getattr(signal, "SIG" + SlurmJobEnvironment.USR_SIG)


def timed_out(run_dir: Path, job_id: str, signum: int) -> bool:
    """Whether a job that ended without its record was ended by its time limit: submitit's log says
    Slurm signalled it, or the worker died of the warning signal itself. Slurm may send that signal
    up to a minute early, so a short limit's warning can come while Python is still starting, before
    any handler is installed; the default action then kills the worker (state FAILED, DerivedExitCode
    0:12), and only the signal tells that it was the time limit."""
    from submitit.core.utils import JobPaths

    if signum == warning_signal():
        return True
    try:
        log = JobPaths(run_dir / "slurm", job_id=job_id, task_id=0).stderr.read_text(errors="replace")
    except OSError:
        return False
    return "this job is timed-out" in log


def _ended(state: str, signum: int) -> str:
    """"state FAILED, its worker killed by SIGKILL": how accounting says the job ended."""
    return f"state {state}" + (f", its worker killed by {signal.Signals(signum).name}"
                               if signum in signal.valid_signals() else "")


class TimeLimitWatch:
    """Notes Slurm's warning of the job's time limit, so that the cell's record says it hit it.

    Slurm signals the job `signal_delay_s` before its limit; submitit's handler of that signal raises
    UncompletedJobError wherever the worker happens to be. Inside an import (torch imports sympy
    lazily) a library's own `except` can swallow it half-way and leave a module half-initialised, and
    the cell then fails with an unrelated error ("module 'sympy' has no attribute 'logic'", seen in
    CI). Installed in the worker, this wraps submitit's handler (preemption and requeueing stay
    submitit's) and notes when it stopped the job for its time limit; `amend` then puts that first in
    a failed record's error, whatever error the cell ended with."""

    def __init__(self, job_id: str | None):
        self.job_id = job_id
        self.signum = warning_signal()
        self.submitits = signal.getsignal(self.signum)
        self.timed_out = False
        signal.signal(self.signum, self._handle)

    def _handle(self, signum, frame) -> None:
        from submitit.core.utils import UncompletedJobError

        try:
            if callable(self.submitits):
                self.submitits(signum, frame)
        except UncompletedJobError:
            self.timed_out = True  # not checkpointable, so not requeued: the cell stops here
            raise

    def amend(self, record: Record) -> Record:
        if not self.timed_out or record.ok:
            return record
        why = (f"slurm job {self.job_id} {REASONS['TIMEOUT']}: Slurm's warning before the limit stopped the "
               "cell (raise the executor option time_limit_min)")
        error = record.error or ""
        return replace(record, error=why if error.startswith("UncompletedJobError") else f"{why}; the cell's "
                       f"error as it stopped: {error}")


def work(job: Job) -> dict:
    """What a Slurm job runs: the cell, its record appended by this worker. Returns the record."""
    attempts = int(os.environ.get("SLURM_RESTART_COUNT", "0")) + 1
    job_id = os.environ.get("SLURM_JOB_ID")
    watch = TimeLimitWatch(job_id)
    return execute(job, job_id=job_id, attempts=attempts, amend=watch.amend).to_json()


class Slurm:
    def __init__(self, options):
        self.options = options
        self.params = _parameters(options)

    def check(self, context, cells) -> None:
        """sbatch --test-only with the same request: Slurm's own message when it would refuse the jobs;
        then sacct, without which job states cannot be followed."""
        if shutil.which("sbatch") is None:
            raise BenchError("executor slurm: no Slurm here (`sbatch` is not on PATH); run from a Slurm login "
                             "node, or pick another executor")
        nodes = max((c.choices.world.nodes for c in cells), default=1)
        many = [f"--nodes={nodes}", "--ntasks-per-node=1"] if nodes > 1 else []  # sbatch: the last flag holds
        proc = _run(["sbatch", "--test-only", *_test_args(self.options), *many, "--wrap", "true"])
        if proc.returncode != 0:
            raise BenchError(f"executor slurm: Slurm refuses these jobs: {_first_error(proc)} "
                             f"(options: {' '.join([*_test_args(self.options), *many])})")
        proc = _run(["sacct", "-X", "-n", "-j", "1"])
        if proc.returncode != 0:
            raise BenchError(f"executor slurm: sacct fails ({_first_error(proc)}); job states need Slurm "
                             "accounting (slurmdbd)")

    def _submit(self, dispatch: Dispatch, cell) -> str:
        import submitit

        folder = dispatch.run_dir / "slurm"
        executor = submitit.SlurmExecutor(folder=folder)
        executor.update_parameters(job_name=f"bb-{cell.key}", **_for_cell(self.params, cell))
        try:
            job = executor.submit(work, dispatch.job(cell))
        except Exception as exc:  # noqa: BLE001 - sbatch's refusal, in its words
            raise BenchError(f"executor slurm: sbatch refused the job of {cell.label}: {exc}") from exc
        dispatch.journal.add(cell.key, "slurm", job.job_id)
        return str(job.job_id)

    def run(self, cells, dispatch: Dispatch) -> None:
        journal = dispatch.journal.latest("slurm")
        recorded = recorded_jobs(dispatch.run_dir)
        in_flight: dict[str, object] = {}
        queue = []
        for cell in cells:
            entry = journal.get(cell.key)
            if entry is not None and (cell.key, entry.job_id) not in recorded:
                in_flight[entry.job_id] = cell  # submitted by an earlier driver: re-attach
                dispatch.started(cell, f"re-attached to job {entry.job_id}")
            else:
                queue.append(cell)
        limit = dispatch.max_parallel or len(cells) or 1
        unknown_since: dict[str, float] = {}
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                cell = queue.pop(0)
                job_id = self._submit(dispatch, cell)
                in_flight[job_id] = cell
                dispatch.started(cell, f"job {job_id}")
            time.sleep(self.options["poll_s"])
            known = states(list(in_flight))
            for job_id, cell in list(in_flight.items()):
                if job_id not in known:
                    # Just submitted (accounting lags a little), or purged from accounting.
                    if time.monotonic() - unknown_since.setdefault(job_id, time.monotonic()) < 120:
                        continue
                    state, nodes, signum = "UNKNOWN", "", 0
                else:
                    state, nodes, signum = known[job_id]
                base = state.split()[0] if state else "UNKNOWN"
                if base in RUNNING:
                    continue
                record = dispatch.collected(cell, job_id)
                if record is None:
                    if base in ("FAILED", "COMPLETED") and timed_out(dispatch.run_dir, job_id, signum):
                        base = "TIMEOUT"  # the limit's warning came before the cell had started
                    reason = REASONS.get(base, "is unknown to Slurm accounting")
                    record = dispatch.fault(cell, f"slurm job {job_id} {reason} ({_ended(state, signum)})",
                                            job_id=job_id, node=nodes or None)
                dispatch.finished(record, cell)
                del in_flight[job_id]

    def close(self) -> None:
        pass  # jobs keep running without the driver; the journal finds them again


@hookimpl
def register_executors(register) -> None:
    register(ExecutorSpec(
        id="slurm", name="Slurm (submitit)", create=Slurm, options=OPTIONS, requires=("submitit",), extra="slurm",
        option_aliases={"time_min": "time_limit_min"},
        description="one Slurm job per cell through submitit; the driver may die and re-attach",
    ))
