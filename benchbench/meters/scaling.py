"""Data-parallel scaling of a model's training step: images/s on N devices (DDP, one process each)
against N x the images/s of one device, measured the same way in the same command.

Weak scaling: every device trains on `batch_size` images per step (the global batch grows with N),
the step is benchbench.step.train_step (as `profile --mode train`), and each rank times a fixed
number of steps (a time budget would let the ranks stop at different steps and leave one waiting in
an all-reduce). The N-device rate is N x the slowest rank's rate. One "device" on the CPU is a
process with the thread budget // N threads (benchbench.runtime.threads), the one-device reference too, so
the efficiency measures what data parallelism costs (gradient all-reduce, processes contending for
memory bandwidth), not threads.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace

import torch
from torch.nn.parallel import DistributedDataParallel

from benchbench.runtime.launch import init_rank, launch
from benchbench.meters.throughput import Inputs, Timing, measure_throughput
from benchbench.precision import resolve
from benchbench.runtime.rendezvous import rendezvous_from_env
from benchbench.plugins import Plugins
from benchbench.runtime.threads import per_rank
from benchbench.world import check_devices

COLLECTIVE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ScalingJob:
    """What a rank needs (picklable): the model by id and the plugins that register it, the synthetic
    inputs (their device: the type only), the precision (resolved), the batch per device, the timing."""

    model: str
    plugins: Plugins
    inputs: Inputs
    precision: str
    batch_size: int  # per device
    warmup_steps: int = 5
    steps: int = 20
    threads: int = 1  # per rank, on the CPU


@dataclass(frozen=True)
class Scaling:
    devices: int
    batch_size_per_device: int
    threads_per_device: int | None  # CPU only
    img_per_s: float  # all devices together
    img_per_s_per_device: float
    img_per_s_one_device: float
    efficiency: float  # img_per_s / (devices x img_per_s_one_device)


def rank_throughput(job: ScalingJob) -> float:
    """One rank: DDP around the model, `steps` timed training steps; this rank's img/s."""
    device, _, _ = init_rank(job.inputs.device, timeout_s=COLLECTIVE_TIMEOUT_S, threads=job.threads)
    spec = job.plugins.load().models.get(job.model)
    torch.manual_seed(0)
    inputs = replace(job.inputs, device=str(device))
    model = spec.build(num_classes=inputs.num_classes, image_size=inputs.image_size, in_chans=inputs.in_chans)
    ddp = DistributedDataParallel(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    result = measure_throughput(ddp, inputs, mode="train", precision=resolve(job.precision, device),
                                batch_size=job.batch_size,
                                timing=Timing(warmup_steps=job.warmup_steps, min_steps=job.steps, min_seconds=0.0))
    return result.img_per_s


def _rate(job: ScalingJob, devices: int) -> float:
    with tempfile.TemporaryDirectory(prefix="benchbench-scaling-") as folder:
        rates = launch(rank_throughput, (job,), rendezvous_from_env(1), devices, folder=folder)
    return devices * min(rates.values())


def measure_scaling(job: ScalingJob, devices: int) -> Scaling:
    """Training img/s on `devices` devices and on one, each in its own launch (one device first); each
    rank gets the thread budget // `devices` (`job.threads` is set here)."""
    device_type = job.inputs.device
    check_devices(device_type, devices)
    job = replace(job, threads=per_rank(devices))
    one = _rate(job, 1)
    many = _rate(job, devices)
    return Scaling(devices=devices, batch_size_per_device=job.batch_size,
                   threads_per_device=job.threads if device_type == "cpu" else None, img_per_s=many,
                   img_per_s_per_device=many / devices, img_per_s_one_device=one,
                   efficiency=many / (devices * one))
