"""Images per second, step time, peak memory and batch-1 latency of one model on one device.

The loop follows nanoGPT's bench.py: synthetic inputs made once on the device (we measure the
model, not a data loader), a few warm-up steps, then timed steps. On CUDA each step is bracketed by
CUDA events recorded back to back on the stream, read after one synchronisation at the end, so the
host never waits inside the timed loop; on the CPU the same bracketing uses time.perf_counter.

Units: `img_per_s` = images / timed seconds (all timed steps together); `step_ms` = the median
step; `peak_mem_mb` in MiB (2**20 bytes). On CUDA it is `torch.cuda.max_memory_allocated` from the
warm-up to the last timed step (tensors only, not the allocator's cache or the CUDA context); on the
CPU it is the process's peak resident set size (`ru_maxrss`) over the process's whole lifetime,
so it includes everything the process did before, and never goes down.

Precisions are benchbench.precision's resolved values (one policy for training and measuring); a
training step is benchbench.step.train_step, the step the training protocols run (AdamW, clipping at
norm 1). What is measured is `Inputs` (the synthetic batches' shape and device) and how, `Timing`.
"""

from __future__ import annotations

import gc
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from benchbench.choices import FP8_INFERENCE, THROUGHPUT_MODES
from benchbench.runtime.clock import sync, time_steps
from benchbench.runtime.envinfo import device_name as _device_name
from benchbench.errors import BenchError
from benchbench.execution import EAGER, Execution, apply, choose, optimizer_options, seconds, step_begin
from benchbench.meters.params import count_params
from benchbench.precision import Precision
from benchbench.step import forward, train_step
from benchbench.world import World

MODES = THROUGHPUT_MODES
# The automatic batch-size search doubles from START up to MAX (per device type): there is no
# out-of-memory signal worth waiting for on a CPU, whose throughput stops growing long before.
START_BATCH_SIZE = 8
MAX_BATCH_SIZE = {"cuda": 2048, "cpu": 64}


@dataclass(frozen=True)
class Inputs:
    """The synthetic batches a measurement feeds: images of `image_size` px and `in_chans` channels,
    labels of `num_classes` classes, made once on `device`."""

    image_size: int
    in_chans: int = 3
    num_classes: int = 1000
    device: str = "cpu"


@dataclass(frozen=True)
class Timing:
    """Untimed warm-up steps, then at least `min_steps` timed steps and `min_seconds`; with `latency`,
    also `latency_repeats` batch-1 forward passes timed one by one. `report(line)`, if given, hears how
    a measurement that takes long goes (`Progress`)."""

    warmup_steps: int = 10
    min_steps: int = 20
    min_seconds: float = 2.0
    latency: bool = False
    latency_repeats: int = 100
    report: Callable[[str], None] | None = None


class Progress:
    """Lines for `Timing.report` while a measurement runs long: silent for its first FIRST_S seconds
    (a quick one says nothing), then one line at least EVERY_S apart, saying the phase (the batch
    search, the warm-up, the timed steps), the steps done, the time a step takes and what is left."""

    FIRST_S, EVERY_S = 5.0, 10.0

    def __init__(self, report: Callable[[str], None] | None):
        self.report, self.start, self.next_at = report, time.monotonic(), self.FIRST_S

    def wrap(self, step: Callable, phase: str, total: int | None = None) -> Callable:
        """`step`, telling the report how the phase goes (`total`: its steps, where known)."""
        if self.report is None:
            return step
        done, began = 0, time.monotonic()

        def counted(*args):
            nonlocal done
            out = step(*args)
            done += 1
            now = time.monotonic()
            if now - self.start >= self.next_at:
                per = (now - began) / done
                left = f", about {per * (total - done):.0f} s left" if total is not None and total > done else ""
                self.report(f"{phase}: {done} step{'s' if done != 1 else ''}"
                            + (f" of {total}" if total is not None else "") + f", {per:.1f} s a step{left}")
                self.next_at = now - self.start + self.EVERY_S
            return out

        return counted


@dataclass(frozen=True)
class Latency:
    """Batch-1 inference latency: host wall time of one forward pass, synchronised, in ms."""

    p50_ms: float
    p90_ms: float
    p99_ms: float
    repeats: int


@dataclass(frozen=True)
class Throughput:
    mode: str  # "infer" | "train"
    device: str  # "cpu", "cuda", "cuda:1"
    device_name: str
    precision: str  # "fp32" | "tf32" | "bf16" | "fp16"
    batch_size: int  # the batch that was measured
    batch_size_requested: int | None  # None: searched (the largest that fitted)
    oom_retries: int  # out-of-memory errors met (search and measurement); each halved the batch
    img_per_s: float
    step_ms: float  # median over the timed steps
    timed_s: float  # all timed steps together
    steps: int  # timed steps
    peak_mem_mb: float  # MiB
    peak_mem_kind: str  # "cuda_max_allocated" | "process_max_rss"
    channels_last: bool
    compiled: bool
    latency_ms_p50: float | None = None  # batch 1, inference; None when not measured
    latency_ms_p90: float | None = None
    latency_ms_p99: float | None = None
    # How it ran (benchbench.execution) and what compiling cost: `compile_s` is the wall time of the
    # untimed warm-up steps when compiled (compilation, CUDA-graph capture, and those steps' work), 0 eager.
    compile_mode: str | None = None
    fused_optimizer: bool = False
    attention: str = "sdpa"
    execution_policy: str = "eager"
    compile_s: float = 0.0
    warmup_s: float = 0.0
    execution_reason: str = ""  # why it ran so (benchbench.execution.Execution.reason)


def is_oom(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the RuntimeError a CPU allocator raises when it cannot allocate."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg
                                              or "not enough memory" in msg)


def _free_memory(device: torch.device) -> None:
    # After an OOM the failed step's tensors are garbage only once its traceback is gone; collect them
    # and hand the cached blocks back so the next, smaller batch starts from a clean allocator.
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def make_step(model: nn.Module, mode: str, precision: Precision, optimizer: torch.optim.Optimizer | None = None,
              execution: Execution | None = None) -> Callable[[torch.Tensor, torch.Tensor], object]:
    """One unit of work on a batch (x, labels): a forward pass, or the training step (benchbench.step).
    `model` is what is called (compiled or not); `execution` says which."""
    execution = execution or EAGER
    if mode == "infer":
        logits = forward(model, precision)

        def infer(x, y):
            step_begin(execution)
            return logits(x)

        return infer
    return train_step(model, optimizer, precision, execution=execution)


def _inputs(batch_size: int, inputs: Inputs, channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch_size, inputs.in_chans, inputs.image_size, inputs.image_size, device=inputs.device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.randint(inputs.num_classes, (batch_size,), device=inputs.device)


def largest_batch(fits: Callable[[int], bool], start: int, maximum: int) -> tuple[int, int]:
    """The largest start * 2**k (<= maximum) for which fits(batch) is True, and the number of misses.

    Doubles from `start` while the batch fits; after a miss above a fit, the fit is the answer; a
    miss at the start halves down to 1. Raises BenchError when not even batch 1 fits."""
    best, misses, batch, ceiling = None, 0, max(1, min(start, maximum)), maximum
    while True:
        if fits(batch):
            best = batch
            if 2 * batch > ceiling:
                return best, misses
            batch *= 2
        else:
            misses += 1
            ceiling = batch - 1  # nothing this large fits
            if best is not None:
                return best, misses
            if batch == 1:
                raise BenchError("out of memory at batch size 1: the model does not fit on this device")
            batch //= 2


def peak_mem_mb(device: torch.device) -> tuple[float, str]:
    """(MiB, kind): the CUDA allocator's peak since the last reset, or the process's lifetime peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return (rss / 2**20 if sys.platform == "darwin" else rss / 2**10), "process_max_rss"


def measure_throughput(model: nn.Module, inputs: Inputs, *, mode: str = "infer", precision: Precision,
                       batch_size: int | None = None, max_batch_size: int | None = None,
                       execution: Execution | None = None, timing: Timing = Timing()) -> Throughput:
    """Throughput of `model` on synthetic batches (`inputs`): forward passes (infer) or optimiser steps
    (train), at `precision` (resolved: benchbench.precision.resolve).

    The model is moved to the inputs' device (and, channels-last, to that memory format); in train
    mode its weights are updated by AdamW, so pass a model whose weights you don't need.
    `batch_size=None` searches the largest batch that fits (doubling from 8 up to `max_batch_size`,
    default 2048 on CUDA and 64 on the CPU); an out-of-memory error while measuring halves the batch
    and starts again, counted in `oom_retries`.

    How the model runs is `execution` (benchbench.execution), by default the policy's choice for this
    device and model size (eager on the CPU; compiled, fused AdamW on CUDA); a caller that knows the
    model's family passes the `execution` chosen for it. The batch-size search runs eagerly; a compiled
    model compiles in the warm-up, which is never timed: its wall time is `compile_s`. `timing` says
    how long, and whether batch-1 inference latency is measured too (`latency_percentiles`)."""
    device = torch.device(inputs.device)
    if mode not in MODES:
        raise BenchError(f"mode {mode!r}: allowed: {', '.join(MODES)}")
    if mode == "infer" and precision.name == "fp8":
        raise BenchError(f"{FP8_INFERENCE}, or mode='train'")
    if batch_size is not None and batch_size < 1:
        raise BenchError(f"batch size {batch_size}: must be at least 1")
    if execution is None:
        ranks = torch.distributed.get_world_size() if torch.distributed.is_available() and \
            torch.distributed.is_initialized() else 1  # a rank of `profile --devices N`
        execution = choose(device, params=count_params(model), world=World(devices=ranks))
    channels_last = execution.channels_last
    was_training = model.training
    model.to(device)
    model.train(mode == "train")
    runner = apply(model, execution)  # channels-last in place; compiled when chosen
    # AdamW as in the scratch protocol (and the paper's pre-training); its two moments per weight are
    # part of the memory a training step needs. lr is irrelevant to speed and small to stay finite;
    # the step itself, gradient clipping included, is the training protocols' (benchbench.step).
    optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-5, **optimizer_options(execution))
                 if mode == "train" else None)
    progress = Progress(timing.report)
    eager = progress.wrap(make_step(model, mode, precision, optimizer), "batch-size search")
    step = make_step(runner, mode, precision, optimizer, execution)
    warmup_s = 0.0

    def batch_of(batch: int):
        return _inputs(batch, inputs, channels_last)

    def after_oom() -> None:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        _free_memory(device)

    def fits(batch: int) -> bool:
        """One eager step at this batch: the search's probe."""
        try:
            eager(*batch_of(batch))
            sync(device)
            return True
        except Exception as exc:  # noqa: BLE001 (anything that is not an OOM is re-raised)
            if not is_oom(exc):
                raise
        after_oom()  # outside the except block, whose traceback holds the failed step's tensors
        return False

    def timed(batch: int) -> list[float] | None:
        """Seconds of each timed step at this batch, or None after an out-of-memory error."""
        nonlocal warmup_s
        try:
            x, y = batch_of(batch)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            start = time.perf_counter()
            warm = progress.wrap(step, f"warm-up at batch {batch}", timing.warmup_steps)
            if execution.compile and timing.report is not None:  # the first step may take minutes
                timing.report(f"warm-up at batch {batch}: compiling, first step"
                              + (f", about {seconds(execution.expected_compile_s)}"
                                 if execution.expected_compile_s else ""))
            for _ in range(timing.warmup_steps):  # first-call costs: allocator, autotuning, compilation
                warm(x, y)
            sync(device)
            warmup_s = time.perf_counter() - start
            measured = progress.wrap(step, f"timed steps at batch {batch}", timing.min_steps)
            return time_steps(lambda: measured(x, y), device, min_steps=timing.min_steps,
                              min_seconds=timing.min_seconds)
        except Exception as exc:  # noqa: BLE001
            if not is_oom(exc):
                raise
        after_oom()
        return None

    try:
        with precision.matmul_mode():
            batch, oom_retries = batch_size, 0
            if batch is None:
                cap = max_batch_size or MAX_BATCH_SIZE.get(device.type, 64)
                batch, oom_retries = largest_batch(fits, START_BATCH_SIZE, cap)
            while (seconds := timed(batch)) is None:
                if batch == 1:
                    raise BenchError("out of memory at batch size 1: the model does not fit on this device")
                batch, oom_retries = batch // 2, oom_retries + 1
            peak_mb, peak_kind = peak_mem_mb(device)
            lat = None
            if timing.latency:
                lat = latency_percentiles(runner, inputs, precision, channels_last=channels_last,
                                          repeats=timing.latency_repeats)
    finally:
        model.train(was_training)
    timed_s = sum(seconds)
    return Throughput(
        mode=mode, device=str(device), device_name=_device_name(device), precision=precision.name,
        batch_size=batch, batch_size_requested=batch_size, oom_retries=oom_retries,
        img_per_s=batch * len(seconds) / timed_s, step_ms=1e3 * statistics.median(seconds), timed_s=timed_s,
        steps=len(seconds), peak_mem_mb=peak_mb, peak_mem_kind=peak_kind, channels_last=channels_last,
        compiled=execution.compile, compile_mode=execution.compile_mode, fused_optimizer=execution.fused_optimizer,
        attention=execution.attention, execution_policy=execution.policy,
        compile_s=warmup_s if execution.compile else 0.0, warmup_s=warmup_s, execution_reason=execution.reason,
        latency_ms_p50=lat.p50_ms if lat else None, latency_ms_p90=lat.p90_ms if lat else None,
        latency_ms_p99=lat.p99_ms if lat else None,
    )


def latency_percentiles(model: nn.Module, inputs: Inputs, precision: Precision, *, channels_last: bool = False,
                        warmup_steps: int = 10, repeats: int = 100) -> Latency:
    """p50/p90/p99 of batch-1 inference latency in ms over `repeats` forward passes.

    Latency is what one request waits for, so each pass is timed alone on the host clock with a
    synchronisation on both sides: kernel-launch overhead, which dominates at batch 1, counts."""
    device = torch.device(inputs.device)
    if repeats < 1:
        raise BenchError(f"latency repeats {repeats}: must be at least 1")
    was_training = model.training
    model.to(device).eval()
    x, _ = _inputs(1, inputs, channels_last)
    times = []
    with precision.matmul_mode():
        logits = forward(model, precision)
        for i in range(warmup_steps + repeats):
            sync(device)
            start = time.perf_counter()
            logits(x)
            sync(device)
            if i >= warmup_steps:
                times.append(time.perf_counter() - start)
    model.train(was_training)
    p50, p90, p99 = np.percentile(np.array(times) * 1e3, [50, 90, 99])
    return Latency(p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99), repeats=repeats)
