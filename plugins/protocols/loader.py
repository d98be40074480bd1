"""Batches for training, evaluation and feature extraction: in-memory tensors sliced, files through
one DataLoader whose worker processes live across epochs."""

from __future__ import annotations

import math
import os
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Loader:
    """Batches over a dataset, iterable once per epoch.

    In-memory tensors are sliced directly (no per-item collation) and their per-batch transform
    applied; other datasets go through one DataLoader whose worker processes live across epochs.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, num_workers: int = 0, pin_memory: bool = False):
        self.dataset, self.batch_size, self.shuffle, self.generator = dataset, batch_size, shuffle, generator
        self._loader = None
        if not isinstance(dataset, TensorDataset):
            self._loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
                                      num_workers=num_workers, pin_memory=pin_memory,
                                      persistent_workers=num_workers > 0)

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._loader is not None:
            yield from self._loader
            return
        x, y = self.dataset.tensors[:2]
        transform = getattr(self.dataset, "transform", None)
        order = torch.randperm(len(x), generator=self.generator) if self.shuffle else None
        for start in range(0, len(x), self.batch_size):
            if order is None:
                xb, yb = x[start:start + self.batch_size], y[start:start + self.batch_size]
            else:
                idx = order[start:start + self.batch_size]
                xb, yb = x[idx], y[idx]
            yield (xb if transform is None else transform(xb)), yb


def batches(
    dataset: Dataset, batch_size: int, *, shuffle: bool = False, generator: torch.Generator | None = None,
    num_workers: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One pass over the data (see `Loader`)."""
    return iter(Loader(dataset, batch_size, shuffle=shuffle, generator=generator, num_workers=num_workers))


def auto_workers(dataset: Dataset) -> int:
    """DataLoader workers when a protocol's num_workers is -1: none for in-memory tensors (a batch is a
    slice); for files, none on one or two CPU cores (measured: a worker there takes cores from the
    training step and costs more than it saves, benchmarks/loader_speed.py), else half the cores, up
    to 4."""
    if isinstance(dataset, TensorDataset):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return 0 if cpus <= 2 else min(4, cpus // 2)


def workers(setting: int, dataset: Dataset) -> int:
    """The num_workers setting: -1 picks (see auto_workers)."""
    return auto_workers(dataset) if setting < 0 else setting
