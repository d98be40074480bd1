"""A wall-clock limit on one cell: `time_limit(seconds)` raises CellTimeLimit inside the code it wraps.

In the main thread a SIGALRM timer raises it (this also interrupts a sleep or a blocking system call);
in another thread (an executor's worker) a timer thread raises it asynchronously in that thread, at its
next Python instruction. Either way the exception's traceback shows where the cell was when its time
ran out. Code stuck inside native code that never returns to Python cannot be stopped in-process.

The exception lands wherever the cell is, and a library's own `except Exception` there (a lazy
import's guard, a retry loop) may swallow it or turn it into another error. So it is raised again
every REPEAT_S seconds until the block ends, and the `Limit` the block gets says it `expired`: the
runner names the time limit first in such a cell's error, whatever error the cell ended with.

Some code must not be interrupted halfway: torch's JIT tracer (the FLOP counter's) keeps process-wide
state that an exception landing in its own Python frames leaves broken, so every later trace in the
process fails ("Cannot get parent from Scope with no parent"). Such code runs in a `shielded()` block:
a limit that falls due there is raised as soon as the block ends.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading


REPEAT_S = 1.0  # after the limit, the exception again this often until the block ends
RETRY_S = 0.01  # a limit deferred (entering or leaving a block, or shielded) is tried again this soon


class CellTimeLimit(TimeoutError):
    """A cell ran past its wall-clock limit."""


class Limit:
    """What a `time_limit` block learns of its limit: `expired` once the exception has been raised in it."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.expired = False

    @property
    def message(self) -> str:
        return _message(self.seconds or 0.0)


def _message(seconds: float) -> str:
    return (f"the cell ran longer than its limit of {seconds:g} s (cell_time_limit_s in [suite], or "
            "--cell-time-limit) and was stopped; the suite goes on. The traceback shows where it was")


def time_limit(seconds: float | None) -> "_Block":
    """A block (use `with`) in which CellTimeLimit is raised once `seconds` of wall time have passed, and
    again every REPEAT_S seconds until the block ends; None: no limit. `with` gives the block's `Limit`."""
    limit = Limit(seconds)
    if not seconds:
        return _Block(limit)
    if threading.current_thread() is threading.main_thread():
        return _Alarm(limit)
    return _Async(limit)


_HERE = globals()  # frames running this module's code: a limit is never raised in them


_SHIELDS: dict[int, int] = {}  # thread id -> depth of the `shielded()` blocks it is in


def _in_here(frame) -> bool:
    return frame is not None and frame.f_globals is _HERE


def _deferred(thread_id: int, frame) -> bool:
    """Whether a limit falling due now in that thread (running `frame`) must wait a moment."""
    return _in_here(frame) or _SHIELDS.get(thread_id, 0) > 0


class shielded:
    """A block (use `with`) that a time limit never interrupts: one that falls due inside is raised
    right after it ends. For short code that must not stop halfway (a JIT trace); nests."""

    def __enter__(self) -> None:
        me = threading.get_ident()
        _SHIELDS[me] = _SHIELDS.get(me, 0) + 1

    def __exit__(self, *exc) -> None:
        me = threading.get_ident()
        _SHIELDS[me] -= 1
        if not _SHIELDS[me]:
            del _SHIELDS[me]


def _settle() -> None:
    """A Python call: a signal that arrived while the block's handler was installed is handled here, by
    that handler (it raises nothing in this module's frames), before the previous one is restored."""


class _Block:
    """No limit. The others are classes (not generators) so that entering and leaving run in this
    module's frames only, where the limit is never raised: the timer and the handler are always undone,
    whatever instant the limit fires (it is deferred while the block is being entered or left)."""

    def __init__(self, limit: Limit):
        self.limit = limit

    def __enter__(self) -> Limit:
        return self.limit

    def __exit__(self, *exc) -> None:
        return None


class _Alarm(_Block):
    def __enter__(self) -> Limit:
        self.closing = False
        self.previous = signal.signal(signal.SIGALRM, self._expire)
        signal.setitimer(signal.ITIMER_REAL, self.limit.seconds, REPEAT_S)
        return self.limit

    def _expire(self, signum, frame) -> None:
        if self.closing:
            return
        if _deferred(threading.get_ident(), frame):  # entering or leaving, or shielded: again in a moment
            signal.setitimer(signal.ITIMER_REAL, RETRY_S, REPEAT_S)
            return
        self.limit.expired = True
        raise CellTimeLimit(self.limit.message)

    def __exit__(self, *exc) -> None:
        self.closing = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        _settle()
        signal.signal(signal.SIGALRM, self.previous)


class _Async(_Block):
    def __enter__(self) -> Limit:
        message = self.limit.message
        self.error = type("CellTimeLimit", (CellTimeLimit,),
                          {"__init__": lambda self: CellTimeLimit.__init__(self, message)})
        self.thread_id = threading.get_ident()
        self.lock, self.done, self.set = threading.Lock(), False, False
        self.timers: list[threading.Timer] = []
        self._arm(self.limit.seconds)
        return self.limit

    def _arm(self, delay: float) -> None:
        timer = threading.Timer(delay, self._expire)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def _expire(self) -> None:
        with self.lock:
            if self.done:
                return
            if _deferred(self.thread_id, sys._current_frames().get(self.thread_id)):  # again in a moment
                self._arm(RETRY_S)
                return
            self.limit.expired = True
            self.set = bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id),
                                                                        ctypes.py_object(self.error)))
            self._arm(REPEAT_S)  # until the block ends: the first may have been swallowed

    def __exit__(self, *exc) -> None:
        while True:  # the limit, set just as the block ended, may land here: then end the block again
            try:
                with self.lock:
                    self.done = True
                    self.timers[-1].cancel()
                    if self.set:  # fired but maybe not raised yet: clear it, so it cannot escape the cell
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id), None)
                return None
            except CellTimeLimit:
                continue
