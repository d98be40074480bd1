"""A wall-clock limit on one cell: `time_limit(seconds)` raises CellTimeLimit inside the code it wraps.

In the main thread a SIGALRM timer raises it (this also interrupts a sleep or a blocking system call);
in another thread (an executor's worker) a timer thread raises it asynchronously in that thread, at its
next Python instruction. Either way the exception's traceback shows where the cell was when its time
ran out. Code stuck inside native code that never returns to Python cannot be stopped in-process.

The exception lands wherever the cell is, and a library's own `except Exception` there (a lazy
import's guard, a retry loop) may swallow it or turn it into another error. So it is raised again
every REPEAT_S seconds until the block ends, and the `Limit` the block gets says it `expired`: the
runner names the time limit first in such a cell's error, whatever error the cell ended with.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from contextlib import contextmanager
from typing import Iterator


REPEAT_S = 1.0  # after the limit, the exception again this often until the block ends


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


@contextmanager
def time_limit(seconds: float | None) -> Iterator[Limit]:
    """Raises CellTimeLimit in the wrapped block once `seconds` of wall time have passed, and again every
    REPEAT_S seconds until the block ends; None: no limit. Yields the block's `Limit`."""
    limit = Limit(seconds)
    if not seconds:
        yield limit
    elif threading.current_thread() is threading.main_thread():
        with _alarm(limit):
            yield limit
    else:
        with _async(limit):
            yield limit


@contextmanager
def _alarm(limit: Limit) -> Iterator[None]:
    def expire(signum, frame):
        limit.expired = True
        raise CellTimeLimit(limit.message)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit.seconds, REPEAT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _async(limit: Limit) -> Iterator[None]:
    message = limit.message
    expired = type("CellTimeLimit", (CellTimeLimit,), {"__init__": lambda self: CellTimeLimit.__init__(self, message)})
    thread_id, lock, state = ctypes.c_ulong(threading.get_ident()), threading.Lock(), {"done": False, "set": False}
    timers: list[threading.Timer] = []

    def arm(delay: float) -> None:
        timer = threading.Timer(delay, expire)
        timer.daemon = True
        timers.append(timer)
        timer.start()

    def expire() -> None:
        with lock:
            if not state["done"]:
                limit.expired = True
                state["set"] = bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, ctypes.py_object(expired)))
                arm(REPEAT_S)  # until the block ends: the first may have been swallowed

    arm(limit.seconds)
    try:
        yield
    finally:
        with lock:
            state["done"] = True
            timers[-1].cancel()
            if state["set"]:  # fired but maybe not raised yet: clear it, so it cannot escape the cell
                ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, None)
