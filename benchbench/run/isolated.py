"""One cell in a process of its own (the local executor's `isolate`): a fault that kills the process
(a segfault or abort in a C extension, SIGKILL from the out-of-memory killer, a CUDA error that
aborts) becomes the cell's failed record, naming the signal; the suite goes on; nothing a cell leaves
behind (allocator caches, compiled graphs, threads, a poisoned CUDA context) reaches the next cell;
and the cell's time limit ends its process instead of raising inside it.

Each cell is forked from a server that imported torch and the plugins once (multiprocessing's
forkserver, preloading benchbench.run.preload), so a cell starts in a fraction of a second instead
of the seconds an interpreter takes to import torch; the server itself never runs a cell, never
initialises CUDA, and stops when this process does. `prestart()` starts it early, so that its imports
overlap the driver's planning. A server that died (a cell may kill it) is started again for the next
cell (`_start`).

The cell's process runs `worker.execute` as any worker does (it appends its own record, under the
store's write lock) and tells this process what it measured as it goes, then its record. It leads a
process group of its own, which holds whatever it starts (a multi-device cell's ranks, data loader
workers), and on Linux it is a child subreaper: a process it starts stays below it however it leaves
the group (a session of its own, a double fork) for as long as the cell's process lives. So the cell's
process ends everything below it before it exits (`end_below`), and stopping a cell (its time limit)
holds its process stopped while everything below it gets SIGTERM, then SIGKILL STOP_GRACE_S later,
then SIGTERM to the cell's process itself; its group is killed after every cell. A cell's process
killed outright (a signal, os._exit) can end nothing: then only its group is killed, and a process
that left the group is not (docs/running.md says what is and is not reaped). Python's fault handler
writes the traceback of a crash, or of a cell stopped at its limit, to a file this process puts in
the record: a file without a name (both processes hold it open), so nothing is left behind however
either of them ends. A cell whose process ends without a record gets a failed record here, with what it had
measured.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import select
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from multiprocessing import reduction
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from benchbench.runtime.deadline import CellTimeLimit, Limit
from benchbench.errors import BenchError
from benchbench.plugins import Catalog
from benchbench.store.record import Record
from benchbench.store.shared import write_lock

STOP_GRACE_S = 5.0  # after SIGTERM, the seconds a cell's processes get to end before SIGKILL
EXIT_WAIT_S = 30.0  # after its record, the seconds a cell's process gets to exit before it is stopped
HOLD_WAIT_S = 1.0  # after SIGSTOP, the seconds a cell's process gets to stop before what it started is ended anyway
START_TRIES = 8  # asks of the server for a cell's process, 0.05 s, 0.1 s, 0.2 s ... apart, before its error stands
PR_SET_CHILD_SUBREAPER = 36  # prctl(2), Linux 3.4+
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
    trace: Any  # the fault handler's file: an _Fd of an unnamed file in this process, an int in the cell's
    environ: Mapping[str, str]
    cwd: str
    stdout: Any  # _Fd in this process, an int in the cell's
    stderr: Any
    mac_counts: Mapping = field(default_factory=dict)


# --- what a cell's process started: found below it in /proc, and ended ------------------------------------


def _become_subreaper() -> bool:
    """Make this process the reaper of the orphans below it (Linux's PR_SET_CHILD_SUBREAPER): a process it
    starts then stays below it, however it leaves (a session of its own, a double fork), while this one
    lives. False where there is no such call."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent's pid) of `pid` from /proc/PID/stat; None when it is gone, or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def below(root: int) -> dict[int, str]:
    """{pid: state} of every process below `root` (its children, theirs, and so on), zombies ("Z") included;
    {} where there is no /proc."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {}
    children: dict[int, list[tuple[int, str]]] = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(stat[1], []).append((pid, stat[0]))
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for pid, state in children.get(todo.pop(), ()):
            if pid not in out:
                out[pid] = state
                todo.append(pid)
    return out


def _send(pid: int, sig: int, tree: Collection[int]) -> None:
    """`sig` to `pid` if its parent is still in `tree` (a process below the cell's, or the cell's). A pidfd
    holds the process while this looks, so a pid that ended meanwhile and went to another process is never
    signalled (where there are no pidfds, the pid itself is)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfds: not Linux 5.3+
        fd = None
    try:
        stat = _stat(pid)
        if stat is None or stat[1] not in tree:
            return
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _signal_below(root: int, sig: int) -> int:
    """`sig` to every process below `root` that runs (not a zombie); how many there were."""
    tree = below(root)
    live = [pid for pid, state in tree.items() if state != "Z"]
    for pid in live:
        _send(pid, sig, {root, *tree})
    return len(live)


def _until(done: Callable[[], bool], seconds: float) -> bool:
    """Whether `done()` came true within `seconds` (asked every 10 ms)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def end_below(root: int, grace_s: float = 0.0) -> None:
    """End every process below `root`: SIGTERM and up to `grace_s` to end (where grace_s > 0), then SIGKILL,
    again to any that appears, until none runs (for at most STOP_GRACE_S more). A zombie has ended: its pid
    stays its own until its parent reaps it."""
    if grace_s > 0 and _signal_below(root, signal.SIGTERM):
        _until(lambda: not any(state != "Z" for state in below(root).values()), grace_s)
    deadline = time.monotonic() + STOP_GRACE_S
    while _signal_below(root, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.005)


# --- the cell's process ------------------------------------------------------------------------------------


def _die_with_driver(conn) -> None:
    """When the driver dies, end everything below this process, then SIGKILL its process group: a thread
    waits for the driver's end of `conn` (a pipe this process writes) to close. Its parent is the server,
    which lives as long as a cell it started does, so a parent-death signal would never come."""
    import threading

    def watch() -> None:
        poll = select.poll()
        poll.register(conn.fileno(), select.POLLERR | select.POLLHUP)
        while not poll.poll():
            pass
        end_below(os.getpid())
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="benchbench-driver-watch", daemon=True).start()


def _enter(conn, setup: Setup) -> None:
    """The cell's process as the driver's: a process group of its own, the reaper of all it starts, its
    environment, folder, stdout and stderr, and a fault handler writing to `setup.trace`."""
    os.setpgid(0, 0)
    _become_subreaper()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ended by it (after the fault handler's traceback, below)
    _die_with_driver(conn)
    os.dup2(setup.stdout, 1)
    os.dup2(setup.stderr, 2)
    os.close(setup.stdout)
    os.close(setup.stderr)
    os.environ.clear()
    os.environ.update(setup.environ)
    os.chdir(setup.cwd)
    trace = os.fdopen(setup.trace, "w")  # noqa: SIM115 - open until the process ends
    faulthandler.enable(trace, all_threads=True)
    faulthandler.register(signal.SIGTERM, trace, all_threads=True, chain=True)


def _execute(job, conn, setup: Setup) -> int:
    """`execute` the job, telling `conn` what it measured, then its record or error; the exit status."""
    from benchbench.run.worker import execute

    mac_counts = dict(setup.mac_counts)
    try:
        catalog = job.context.plugins.load()
        record = execute(job, catalog=catalog, mac_counts=mac_counts, job_id=setup.job_id,
                         report=lambda fields: conn.send(("measured", fields)))
    except BenchError as exc:  # the user's to fix (a full disk under the records, a plugin): the driver says it
        conn.send(("bench_error", str(exc)))
        return 2
    except BaseException as exc:  # noqa: BLE001 - said to the driver, which records it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return 1
    conn.send(("record", record.to_json(), {k: v for k, v in mac_counts.items() if k not in setup.mac_counts}))
    return 0


def _cell_main(job, conn, setup: Setup) -> None:
    """The cell's process: `_enter`, then `execute`, what it measured and its record going to `conn`; then
    everything it started and left running, detached or not, is ended before it exits."""
    _enter(conn, setup)
    status = _execute(job, conn, setup)
    end_below(os.getpid())
    if status:
        _run_exit_finalizers()
        os._exit(status)


def _run_exit_finalizers() -> None:
    """multiprocessing's finalizers of exit priority 0 and up, which a normal exit runs first: each named
    semaphore the cell made through a spawn or forkserver context (torch's elastic launcher makes them for a
    data-parallel cell) is unlinked and told to the resource tracker, which otherwise warns of "leaked
    semaphore objects" as the run ends. Not sys.exit: that would also join the cell's threads and child
    processes, which may never end."""
    from multiprocessing import util

    util._run_finalizers(0)  # noqa: SLF001 - the exit's first step, without the joins that follow it


# --- the driver's side ---------------------------------------------------------------------------------


def _start(ctx, job, setup: Setup, name: str):
    """(process, the pipe it writes to): the cell's process, started from the server. multiprocessing
    starts the server again where it finds it dead (a cell may kill it), but for a moment after a SIGKILL
    the kernel reports a dying server as running (its files closed, not yet a zombie): a process asked
    of it then fails (EOFError, BrokenPipeError, ConnectionRefusedError), so it is asked again, START_TRIES
    times in all. Each ask has a pipe of its own: a process the dying server forked has its pipe closed, and
    dies of it (`_die_with_driver`)."""
    failed = 0
    while True:
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_cell_main, args=(job, send, setup), name=name, daemon=False)
        try:
            process.start()
            return process, receive
        except (EOFError, OSError):
            receive.close()
            failed += 1
            if failed == START_TRIES:
                raise
        finally:
            send.close()
        time.sleep(0.05 * 2 ** (failed - 1))


def _pidfd(process) -> int | None:
    """A pidfd of the cell's process (Linux 5.3+): it becomes readable when the process ends, whoever its
    parent is by then (the server may die before the cell does), and signals only that process. None where
    there are none, or once the server has said the process ended (its pid may be another's by then)."""
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        return None
    if wait([process.sentinel], 0):
        os.close(fd)
        return None
    return fd


@dataclass(frozen=True)
class _Handle:
    """A started cell's process, and how to see it end and signal it alone."""

    process: Any  # multiprocessing.Process
    pidfd: int | None

    @property
    def ended(self):
        """What `wait` sees ready once the process has ended."""
        return self.pidfd if self.pidfd is not None else self.process.sentinel

    def running(self) -> bool:
        """Whether the process has not ended (a zombie has)."""
        return self.process.pid is not None and not wait([self.ended], 0)

    def signal(self, sig: int) -> bool:
        """`sig` to the process alone while it runs (never to its pid once it has ended); whether sent."""
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, sig)
            elif self.process.exitcode is None:
                os.kill(self.process.pid, sig)
            else:
                return False
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` for the process to end, then for the server to say its exit status (a dead
        server says 255); whether it has ended."""
        if not wait([self.ended], timeout):
            return False
        self.process.join(STOP_GRACE_S)
        return True


def _signal_group(cell: _Handle, sig: int) -> None:
    """`sig` to the process group the cell's process leads; to the process alone while it runs and has not
    made its group yet."""
    try:
        os.killpg(cell.process.pid, sig)
        return
    except ProcessLookupError:
        pass
    except PermissionError:  # not ours
        return
    cell.signal(sig)


def _held(cell: _Handle) -> bool:
    """Whether the cell's process is stopped (SIGSTOP), or has ended."""
    stat = _stat(cell.process.pid)
    return not cell.running() or stat is None or stat[0] in "tTZ"


def stop(cell: _Handle, grace_s: float = STOP_GRACE_S) -> None:
    """Terminate, then kill, the cell's process and everything below it. The process is held (SIGSTOP) while
    what it started gets SIGTERM, then SIGKILL after `grace_s`: held, it neither ends (which would hand what
    is below it to init) nor starts more. Then SIGTERM to its group (its fault handler writes where it was)
    and SIGCONT; SIGKILL to what is left `grace_s` later."""
    if cell.signal(signal.SIGSTOP):
        _until(lambda: _held(cell), HOLD_WAIT_S)
        if cell.running():
            end_below(cell.process.pid, grace_s)
    _signal_group(cell, signal.SIGTERM)
    cell.signal(signal.SIGCONT)
    if not cell.join(grace_s) and cell.running():
        end_below(cell.process.pid)  # started since, by a process that outlived its SIGTERM
    _signal_group(cell, signal.SIGKILL)
    cell.join()


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
    elif exitcode is None:  # the server that forked it did not say (it was stopped, or is slow to)
        text = "the cell's process ended before writing its record, how is unknown"
    else:
        text = f"the cell's process exited with status {exitcode} before writing its record"
    return f"{CellProcessDied.__name__}: {text}" + (f"; its last words: {last_words}" if last_words else "")


@dataclass
class _Heard:
    """What the driver heard from a cell's process; when the cell began (its first report, or its fork)."""

    measured: dict[str, Any] = field(default_factory=dict)
    record: Record | None = None
    last_words: str | None = None
    bench_error: BenchError | None = None
    expired: bool = False
    begun: float = field(default_factory=time.monotonic)


def _hear(heard: _Heard, message: tuple, mac_counts: dict | None) -> bool:
    """Take one message of the cell's process into `heard`; True for its first report (the cell starts)."""
    first = False
    if message[0] == "measured":
        if not heard.measured:  # its plugins loaded: its time and limit count from here
            heard.begun, first = time.monotonic(), True
        heard.measured.update(message[1])
    elif message[0] == "error":
        heard.last_words = message[1]
    elif message[0] == "bench_error":
        heard.bench_error = BenchError(message[1])
    elif message[0] == "record":
        heard.record = Record.from_json(message[1])
        if mac_counts is not None:
            mac_counts.update(message[2])
    return first


def _listen(cell: _Handle, receive, limit: float | None, mac_counts: dict | None) -> _Heard:
    """What the cell's process says until its record, its end, or its time limit (then `expired`)."""
    heard = _Heard()
    deadline = None if not limit else heard.begun + limit  # until the cell reports its start
    while heard.record is None:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = wait([receive, cell.ended], timeout)
        if receive in ready:
            try:
                message = receive.recv()
            except EOFError:  # the process closed its end: it is ending
                break
            if _hear(heard, message, mac_counts) and limit:
                deadline = heard.begun + limit
            continue
        if cell.ended in ready:
            break
        if deadline is not None and time.monotonic() >= deadline:
            heard.expired = True
            break
    return heard


def run_apart(job, *, catalog: Catalog, mac_counts: dict | None = None,
              fault: Callable[[Any, Mapping[str, Any], str, str], Record]) -> Record:
    """Run `job` (a worker.Job) in a process of its own; its record (appended by that process, or here
    by `fault(job, measured, error, traceback)` when it died or hit its time limit). A
    KeyboardInterrupt here stops the cell's process once no record is being appended, and propagates:
    the cell is not recorded, as with a cell in this process."""
    ctx = _context()
    job_id = f"local-{uuid.uuid4().hex[:12]}"
    # no name on disk (O_TMPFILE, or unlinked at once): a driver killed outright leaves no file behind
    trace_file = tempfile.TemporaryFile(prefix="benchbench-cell-", suffix=".trace")
    setup = Setup(job_id, _Fd(trace_file.fileno()), dict(os.environ), os.getcwd(), _Fd(1), _Fd(2),
                  dict(mac_counts or {}))
    # The limit is this process's: the cell's own runs without one (no alarm inside it).
    apart = replace(job, cell=replace(job.cell, time_limit_s=None))
    oom_before = _oom_kills()
    try:
        process, receive = _start(ctx, apart, setup, f"benchbench cell {job.cell.key[:12]}")
    except BaseException:
        trace_file.close()
        raise
    cell = _Handle(process, _pidfd(process))
    try:
        heard = _listen(cell, receive, job.cell.time_limit_s, mac_counts)
        if heard.expired or (heard.record is not None and not cell.join(EXIT_WAIT_S)):
            stop(cell)
        cell.join()
        _signal_group(cell, signal.SIGKILL)  # whatever the cell started and left running in its group
    except BaseException:
        if cell.running():
            with write_lock(job.context.run_dir):  # never stopped halfway through appending its record
                stop(cell, grace_s=0.0)
        raise
    finally:
        receive.close()
        if cell.pidfd is not None:
            os.close(cell.pidfd)
        trace = _read_trace(trace_file)
    return _outcome(job, job_id, heard, (process.exitcode, oom_before, trace), fault)


def _outcome(job, job_id: str, heard: _Heard, end: tuple[int | None, int | None, str], fault) -> Record:
    """The cell's record: the one its process wrote, else `fault`'s, naming its time limit or its death.
    `end` is (the process's exit status, the cgroup's OOM kills before it, its fault handler's traceback)."""
    exitcode, oom_before, trace = end
    if heard.record is not None:
        return heard.record
    if heard.bench_error is not None:  # as in this process: one line, status 2, and nothing recorded for the cell
        raise heard.bench_error
    seconds = time.monotonic() - heard.begun
    if heard.expired:
        error = f"{CellTimeLimit.__name__}: {Limit(job.cell.time_limit_s).message}"
        trace = trace or f"(the cell's process ended at SIGTERM without a traceback, {seconds:.1f} s after it started)"
    else:
        error = death(exitcode, oom_before, _oom_kills(), heard.last_words)
    return fault(job, {**heard.measured, "job_id": job_id, "wall_seconds": seconds}, error, trace)


def _read_trace(file) -> str:
    """What the cell's fault handler wrote to `file` (the cell's process writes through its own descriptor
    of it, at the offset they share: read from the start), the file closed."""
    try:
        fd = file.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    finally:
        file.close()

