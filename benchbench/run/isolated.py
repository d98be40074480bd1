"""One cell in a process of its own (the local executor's `isolate`): a fault that kills the process
(a segfault or abort in a C extension, SIGKILL from the out-of-memory killer, a CUDA error that
aborts) becomes the cell's failed record, naming the signal; the suite goes on; nothing a cell leaves
behind (allocator caches, compiled graphs, threads, a poisoned CUDA context) reaches the next cell;
and the cell's time limit ends its process instead of raising inside it.

Each cell is forked from a server that imported torch and the plugins once (multiprocessing's
forkserver, preloading benchbench.run.preload), so a cell starts in a fraction of a second instead
of the seconds an interpreter takes to import torch; the server itself never runs a cell, never
initialises CUDA, and stops when this process does. `prestart()` starts it early, so that its imports
overlap the driver's planning.

The cell's process runs `worker.execute` as any worker does (it appends its own record, under the
store's write lock) and tells this process what it measured as it goes, then its record. It leads a
process group of its own, which holds whatever it starts (a multi-device cell's ranks, data loader
workers): stopping a cell is SIGTERM to the group, then SIGKILL to it STOP_GRACE_S later, and the
group is killed after every cell, so nothing outlives it. Python's fault handler writes the
traceback of a crash, or of a cell stopped at its limit, to a file this process puts in the record.
A cell whose process ends without a record gets a failed record here, with what it had measured.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from multiprocessing import reduction
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Mapping

from benchbench.runtime.deadline import CellTimeLimit, Limit
from benchbench.errors import BenchError
from benchbench.plugins import Catalog
from benchbench.store.record import Record
from benchbench.store.shared import write_lock

STOP_GRACE_S = 5.0  # after SIGTERM, the seconds a cell's processes get to end before SIGKILL
EXIT_WAIT_S = 30.0  # after its record, the seconds a cell's process gets to exit before it is stopped
PRELOAD = "benchbench.run.preload"
# Imported before the server starts, so that a plugin calling torch.cuda.is_available() at import asks
# NVML instead of initialising CUDA in the server (torch reads it; see benchbench.run.preload).
FORK_SAFE_CUDA_CHECK = ("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


class CellProcessDied(Exception):
    """A cell's process ended (a signal, an exit) before its record was written."""


def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([PRELOAD])
    return ctx


def prestart() -> None:
    """Start the server of isolated cells now (its imports take seconds), if it is not running."""
    from multiprocessing import forkserver

    os.environ.setdefault(*FORK_SAFE_CUDA_CHECK)
    _context()
    forkserver.ensure_running()


class _Fd:
    """A file descriptor of this process handed to the cell's process (its stdout or stderr as they are
    now: the server's are this process's at the time it started)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _inherited, (reduction.DupFd(self.fd),)


def _inherited(dup) -> int:
    return dup.detach()


@dataclass(frozen=True)
class Setup:
    """What a cell's process takes from this one besides its job."""

    job_id: str
    trace_path: str
    environ: Mapping[str, str]
    cwd: str
    stdout: Any  # _Fd in this process, an int in the cell's
    stderr: Any
    mac_counts: Mapping = field(default_factory=dict)


def _die_with_driver(conn) -> None:
    """SIGKILL for this process group when the driver dies: a thread waits for the driver's end of `conn`
    (a pipe this process writes) to close. Its parent is the server, which lives as long as a cell it
    started does, so a parent-death signal would never come."""
    import select
    import threading

    def watch() -> None:
        poll = select.poll()
        poll.register(conn.fileno(), select.POLLERR | select.POLLHUP)
        while not poll.poll():
            pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="benchbench-driver-watch", daemon=True).start()


def _cell_main(job, conn, setup: Setup) -> None:
    """The cell's process: the driver's environment, a process group of its own, a fault handler writing
    to `setup.trace_path`, then `execute`; what it measured and its record go to `conn`."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ended by it (after the fault handler's traceback, below)
    _die_with_driver(conn)
    os.dup2(setup.stdout, 1)
    os.dup2(setup.stderr, 2)
    os.close(setup.stdout)
    os.close(setup.stderr)
    os.environ.clear()
    os.environ.update(setup.environ)
    os.chdir(setup.cwd)
    trace = open(setup.trace_path, "w")  # noqa: SIM115 - open until the process ends
    faulthandler.enable(trace, all_threads=True)
    faulthandler.register(signal.SIGTERM, trace, all_threads=True, chain=True)
    from benchbench.run.worker import execute

    mac_counts = dict(setup.mac_counts)
    try:
        catalog = job.context.plugins.load()
        record = execute(job, catalog=catalog, mac_counts=mac_counts, job_id=setup.job_id,
                         report=lambda fields: conn.send(("measured", fields)))
    except BenchError as exc:  # the user's to fix (a full disk under the records, a plugin): the driver says it
        conn.send(("bench_error", str(exc)))
        os._exit(2)
    except BaseException as exc:  # noqa: BLE001 - said to the driver, which records it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        os._exit(1)
    conn.send(("record", record.to_json(), {k: v for k, v in mac_counts.items() if k not in setup.mac_counts}))


def _signal_group(process, sig: int) -> None:
    """`sig` to the process group the cell's process leads; to the process alone while it lives and has
    not made its group yet (never to its pid once it has ended: the pid may be another process's by then)."""
    try:
        os.killpg(process.pid, sig)
        return
    except ProcessLookupError:
        pass
    except PermissionError:  # not ours
        return
    if process.exitcode is None:
        try:
            os.kill(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop(process, grace_s: float = STOP_GRACE_S) -> None:
    """Terminate, then kill: SIGTERM to the cell's process group, SIGKILL to what is left of it after
    `grace_s` (the group too: a rank or a loader worker may outlive its leader)."""
    _signal_group(process, signal.SIGTERM)
    process.join(grace_s)
    _signal_group(process, signal.SIGKILL)
    process.join()


def _oom_kills() -> int | None:
    """The out-of-memory kills counted in this process's cgroup (v2 memory.events), or None."""
    try:
        line = Path("/proc/self/cgroup").read_text().strip().splitlines()[0]
        events = Path("/sys/fs/cgroup", line.partition("::")[2].lstrip("/"), "memory.events").read_text()
    except (OSError, IndexError):
        return None
    for row in events.splitlines():
        name, _, count = row.partition(" ")
        if name == "oom_kill" and count.isdigit():
            return int(count)
    return None


def death(exitcode: int | None, oom_before: int | None, oom_after: int | None, last_words: str | None) -> str:
    """Why a cell's process ended without its record, in one line naming the signal."""
    if exitcode is not None and exitcode < 0:
        sig = signal.Signals(-exitcode)
        text = f"the cell's process was killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
        if sig == signal.SIGKILL:
            if oom_before is not None and oom_after is not None and oom_after > oom_before:
                text += (f": the kernel's out-of-memory killer (oom_kill in the cgroup's memory.events went "
                         f"{oom_before} -> {oom_after})")
            else:
                text += (": the out-of-memory killer sends it when memory runs out (see dmesg), as does kill -9 "
                         "or a scheduler")
    else:
        text = f"the cell's process exited with status {exitcode} before writing its record"
    return f"{CellProcessDied.__name__}: {text}" + (f"; its last words: {last_words}" if last_words else "")


def run_apart(job, *, catalog: Catalog, mac_counts: dict | None = None,
              fault: Callable[[Any, Mapping[str, Any], str, str], Record]) -> Record:
    """Run `job` (a worker.Job) in a process of its own; its record (appended by that process, or here
    by `fault(job, measured, error, traceback)` when it died or hit its time limit). A
    KeyboardInterrupt here stops the cell's process once no record is being appended, and propagates:
    the cell is not recorded, as with a cell in this process."""
    ctx = _context()
    limit = job.cell.time_limit_s
    job_id = f"local-{uuid.uuid4().hex[:12]}"
    fd, trace_path = tempfile.mkstemp(prefix="benchbench-cell-", suffix=".trace")
    os.close(fd)
    receive, send = ctx.Pipe(duplex=False)
    setup = Setup(job_id, trace_path, dict(os.environ), os.getcwd(), _Fd(1), _Fd(2), dict(mac_counts or {}))
    # The limit is this process's: the cell's own runs without one (no alarm inside it).
    process = ctx.Process(target=_cell_main, args=(replace(job, cell=replace(job.cell, time_limit_s=None)), send, setup),
                          name=f"benchbench cell {job.cell.key[:12]}", daemon=False)
    oom_before = _oom_kills()
    measured: dict[str, Any] = {}
    record, last_words, expired, bench_error = None, None, False, None
    start = begun = time.monotonic()
    try:
        process.start()
        send.close()
        deadline = None if not limit else start + limit  # until the cell reports its start
        while record is None:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([receive, process.sentinel], timeout)
            if receive in ready:
                try:
                    message = receive.recv()
                except EOFError:  # the process closed its end: it is ending
                    process.join()
                    break
                if message[0] == "measured":
                    if not measured:  # the cell starts (its plugins loaded): its time and limit count from here
                        begun = time.monotonic()
                        deadline = begun + limit if limit else None
                    measured.update(message[1])
                elif message[0] == "error":
                    last_words = message[1]
                elif message[0] == "bench_error":
                    bench_error = BenchError(message[1])
                elif message[0] == "record":
                    record = Record.from_json(message[1])
                    if mac_counts is not None:
                        mac_counts.update(message[2])
                continue
            if process.sentinel in ready:
                process.join()
                break
            if deadline is not None and time.monotonic() >= deadline:
                expired = True
                stop(process)
                break
        if record is not None:
            process.join(EXIT_WAIT_S)
            if process.exitcode is None:
                stop(process)
        _signal_group(process, signal.SIGKILL)  # whatever the cell started and left running
    except BaseException:
        if process.pid is not None and process.exitcode is None:
            with write_lock(job.context.run_dir):  # never stopped halfway through appending its record
                stop(process, grace_s=0.0)
        raise
    finally:
        receive.close()
        trace = _read_and_remove(trace_path)
    if record is not None:
        return record
    if bench_error is not None:  # as in this process: one line, status 2, and nothing recorded for the cell
        raise bench_error
    seconds = time.monotonic() - begun
    if expired:
        error = f"{CellTimeLimit.__name__}: {Limit(limit).message}"
        trace = trace or f"(the cell's process ended at SIGTERM without a traceback, {seconds:.1f} s after it started)"
    else:
        error = death(process.exitcode, oom_before, _oom_kills(), last_words)
    return fault(job, {**measured, "job_id": job_id, "wall_seconds": seconds}, error, trace)


def _read_and_remove(path: str) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip()
        os.unlink(path)
    except OSError:
        return ""
    return text

