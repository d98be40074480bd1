"""The device clock: wall time of work queued on a device, for training, evaluation and benchmarks."""

from __future__ import annotations

import time
from typing import Callable

import torch

from benchbench.errors import BenchError


def sync(device: torch.device) -> None:
    """Wait for the work queued on `device` (a no-op on the CPU, whose work is done when queued)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DeviceClock:
    """Seconds of work on a device inside `with`; waits for queued CUDA work before reading the clock."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds = 0.0
        self._start: float | None = None

    def __enter__(self) -> "DeviceClock":
        sync(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        sync(self.device)
        self.seconds += time.perf_counter() - self._start

    def elapsed(self) -> float:
        """Seconds since entering, without waiting for the device (for progress display only)."""
        return max(time.perf_counter() - self._start, 1e-9) if self._start is not None else 1e-9


def time_steps(run: Callable[[], object], device: torch.device, *, min_steps: int,
               min_seconds: float) -> list[float]:
    """Seconds of each step, steps run back to back until both minimums are met.

    Marks are taken between steps (CUDA events or perf_counter), so the steps' times add up to the
    whole timed span, loop overhead included. On CUDA the host clock only decides when to stop
    queueing work: the host can run ahead of the device, never behind it, so the device's timed span
    is at least about min_seconds."""
    if min_steps < 1:
        raise BenchError(f"min_steps {min_steps}: must be at least 1")
    if device.type == "cuda":
        stream = torch.cuda.current_stream(device)  # where this device's kernels are queued

        def mark():
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)
            return event
    else:
        mark = time.perf_counter
    marks = [mark()]
    start = time.perf_counter()
    while len(marks) <= min_steps or time.perf_counter() - start < min_seconds:
        run()
        marks.append(mark())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
    return [b - a for a, b in zip(marks, marks[1:])]
