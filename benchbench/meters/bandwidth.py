"""Measured memory bandwidth of a device: the copy of one large buffer into another, STREAM's "copy".

A copy of n bytes reads n and writes n, so it moves 2 n bytes (STREAM's convention). The buffer is far larger
than the last-level cache (1 GiB on a GPU, or an eighth of its memory where that is less; 256 MiB on a CPU,
beyond the L3 of the CPUs at hand), so the figure is DRAM's, the one a datasheet quotes as "memory bandwidth".
A copy reaches less than the datasheet's figure (typically 80-92 % on GPUs: refresh, turnarounds): the two are
shown side by side (`benchbench device`), never one for the other.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

MIB = 1 << 20


def default_copy_bytes(device: torch.device) -> int:
    """The buffer a copy is timed on: 1 GiB on a GPU (an eighth of its memory where that is less), 256 MiB on
    a CPU."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return min(1024 * MIB, total // 8 // MIB * MIB)
    return 256 * MIB


def best_seconds(work: Callable[[], object], device: torch.device, warmup: int = 3, repeats: int = 10) -> float:
    """The shortest of `repeats` timed calls of `work` after `warmup` untimed ones: CUDA events on a GPU
    (the device's time, not the host's), the wall clock on a CPU. The best, not the median: an attainable
    rate, and on a shared machine the slow repeats are other processes' doing."""
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    best = float("inf")
    for i in range(warmup + repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            work()
            end.record(stream)
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t = time.perf_counter()
            work()
            seconds = time.perf_counter() - t
        if i >= warmup:
            best = min(best, seconds)
    return best


def measured_copy_bytes_per_s(device: torch.device | str, nbytes: int | None = None, repeats: int = 10) -> float:
    """Bytes per second moved by the best of `repeats` copies of an `nbytes` buffer (default
    `default_copy_bytes`) into another on `device`: 2 * nbytes / seconds (a read and a write)."""
    device = torch.device(device)
    nbytes = nbytes or default_copy_bytes(device)
    if nbytes < MIB:
        raise ValueError(f"a copy of {nbytes} bytes measures the cache, not the memory: take at least 1 MiB")
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)  # touched: every page is mapped
    dst = torch.empty_like(src)
    seconds = best_seconds(lambda: dst.copy_(src), device, repeats=repeats)
    return 2 * src.numel() * src.element_size() / seconds
