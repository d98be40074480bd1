"""A wall-clock limit on one cell: `time_limit(seconds)` raises CellTimeLimit inside the code it wraps.

In the main thread a SIGALRM timer raises it (this also interrupts a sleep or a blocking system call);
in another thread (an executor's worker) a timer thread raises it asynchronously in that thread, at its
next Python instruction. Either way the exception's traceback shows where the cell was when its time
ran out. Code stuck inside native code that never returns to Python cannot be stopped in-process.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class CellTimeLimit(TimeoutError):
    """A cell ran past its wall-clock limit."""


def _message(seconds: float) -> str:
    return (f"the cell ran longer than its limit of {seconds:g} s (cell_time_limit_s in [suite], or "
            "--cell-time-limit) and was stopped; the suite goes on. The traceback shows where it was")


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raises CellTimeLimit in the wrapped block once `seconds` of wall time have passed; None: no limit."""
    if not seconds:
        yield
    elif threading.current_thread() is threading.main_thread():
        with _alarm(seconds):
            yield
    else:
        with _async(seconds):
            yield


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise CellTimeLimit(_message(seconds))

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _async(seconds: float) -> Iterator[None]:
    message = _message(seconds)
    expired = type("CellTimeLimit", (CellTimeLimit,), {"__init__": lambda self: CellTimeLimit.__init__(self, message)})
    thread_id, lock, state = ctypes.c_ulong(threading.get_ident()), threading.Lock(), {"done": False, "set": False}

    def expire() -> None:
        with lock:
            if not state["done"]:
                state["set"] = bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, ctypes.py_object(expired)))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["set"]:  # fired but maybe not raised yet: clear it, so it cannot escape the cell
                ctypes.pythonapi.PyThreadState_SetAsyncExc(thread_id, None)
