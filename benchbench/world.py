"""How many processes train one cell, and how: devices per node x nodes, replicated (DDP) or sharded
(FSDP). A cell's `World` is resolved once from the settings its protocol declares for it
(`specs.Roles`), and everything that needs the count reads it here: the runner, the dry run's pace,
the device checks before a run, the Slurm executor's node request, the data-parallel launch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from benchbench.errors import BenchError

SHARDINGS = ("ddp", "fsdp")


@dataclass(frozen=True)
class World:
    devices: int = 1  # processes per node (GPUs on CUDA, processes on the CPU)
    nodes: int = 1
    sharding: str = "ddp"

    @property
    def size(self) -> int:
        """Processes in all: devices x nodes."""
        return self.devices * self.nodes

    @property
    def parallel(self) -> bool:
        """True when the cell runs in ranks (more than one process, or sharded)."""
        return self.size > 1 or self.sharding != "ddp"

    @property
    def sharded(self) -> bool:
        return self.sharding == "fsdp"

    def check_batch(self, batch_size: int) -> None:
        """A BenchError for a global batch the ranks cannot split evenly (each step, each rank takes an
        equal part of it), naming the nearest batch sizes that divide."""
        if batch_size % self.size:
            below = batch_size - batch_size % self.size
            fix = f"{below} or {below + self.size}" if below else f"{self.size}"
            raise BenchError(f"batch_size = {batch_size} is the global batch: it must divide by the {self.size} "
                             f"devices (devices x nodes = {self.devices} x {self.nodes}); e.g. batch_size = {fix}")


SINGLE = World()


def available_devices(device_type: str) -> int:
    """Processes one node can run: its CUDA devices, or on the CPU its usable cores (one each)."""
    if device_type == "cuda":
        import torch

        return torch.cuda.device_count()
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_devices(device_type: str, devices: int) -> None:
    """A BenchError, before anything starts, for a device type without a backend or more devices than
    this node has."""
    if device_type not in ("cpu", "cuda"):
        raise BenchError(f"devices = {devices}: data-parallel runs use cpu (gloo) or cuda (nccl), not {device_type}")
    have = available_devices(device_type)
    if devices > have:
        what = "CUDA devices" if device_type == "cuda" else "CPU cores (one process each)"
        raise BenchError(f"devices = {devices}: this machine has {have} {what}; set devices to at most {have}")
