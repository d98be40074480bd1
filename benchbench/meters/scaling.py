"""Data-parallel scaling of a model's training step: images/s on N devices (DDP, one process each)
against N x the images/s of one device, measured the same way in the same command.

Weak scaling: every device trains on `batch_size` images per step (the global batch grows with N),
the step is benchbench.step.train_step (as `profile --mode train`), and each rank times a fixed
number of steps (a time budget would let the ranks stop at different steps and leave one waiting in
an all-reduce). The N-device rate is N x the slowest rank's rate. One "device" on the CPU is a
process with the thread budget // N threads (benchbench.threads), the one-device reference too, so the efficiency measures what
data parallelism costs (gradient all-reduce, processes contending for memory bandwidth), not threads.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

from benchbench.launch import check_devices, init_rank, launch
from benchbench.rendezvous import rendezvous_from_env
from benchbench.threads import per_rank

COLLECTIVE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ScalingJob:
    """What a rank needs (picklable): the model by id, synthetic inputs' shape, the timing."""

    model: str
    plugin_files: tuple[str, ...]
    device_type: str
    threads: int
    num_classes: int
    image_size: int
    in_chans: int
    precision: str
    batch_size: int  # per device
    warmup_steps: int
    steps: int


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
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from benchbench.meters.throughput import measure_throughput
    from benchbench.plugins import load_catalog

    device, _, _ = init_rank(job.device_type, timeout_s=COLLECTIVE_TIMEOUT_S, threads=job.threads)
    spec = load_catalog(job.plugin_files).models.get(job.model)
    torch.manual_seed(0)
    model = spec.build(num_classes=job.num_classes, image_size=job.image_size, in_chans=job.in_chans).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    result = measure_throughput(ddp, image_size=job.image_size, in_chans=job.in_chans, num_classes=job.num_classes,
                                mode="train", device=device, precision=job.precision, batch_size=job.batch_size,
                                warmup_steps=job.warmup_steps, min_steps=job.steps, min_seconds=0.0)
    return result.img_per_s


def _rate(job: ScalingJob, devices: int) -> float:
    with tempfile.TemporaryDirectory(prefix="benchbench-scaling-") as folder:
        rates = launch(rank_throughput, (job,), rendezvous_from_env(1), devices, folder=folder)
    return devices * min(rates.values())


def measure_scaling(model: str, *, devices: int, device_type: str, plugin_files: tuple[str, ...] = (),
                    num_classes: int = 1000, image_size: int, in_chans: int = 3, precision: str = "fp32",
                    batch_size: int = 32, warmup_steps: int = 5, steps: int = 20) -> Scaling:
    """Training img/s on `devices` devices and on one, each in its own launch (one device first)."""
    check_devices(device_type, devices)
    threads = per_rank(devices)
    job = ScalingJob(model=model, plugin_files=plugin_files, device_type=device_type, threads=threads,
                     num_classes=num_classes, image_size=image_size, in_chans=in_chans, precision=precision,
                     batch_size=batch_size, warmup_steps=warmup_steps, steps=steps)
    one = _rate(job, 1)
    many = _rate(job, devices)
    return Scaling(devices=devices, batch_size_per_device=batch_size,
                   threads_per_device=threads if device_type == "cpu" else None, img_per_s=many,
                   img_per_s_per_device=many / devices, img_per_s_one_device=one,
                   efficiency=many / (devices * one))
