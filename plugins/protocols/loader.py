"""Batches for training, evaluation and feature extraction: in-memory tensors sliced, files through
one DataLoader whose worker processes live across epochs; in data-parallel runs, each rank's part
of every global batch."""

from __future__ import annotations

import math
import os
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler, TensorDataset


def rank_part(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s contiguous part of one global batch of indices: `world` parts whose sizes differ
    by at most one (the first len % world parts one larger), together the whole batch, no overlap."""
    return batch if world == 1 else batch.tensor_split(world)[rank]


class RankBatches(Sampler):
    """Index batches for one rank: the order of `sampler` (a seeded permutation, or 0..n-1) cut into
    global batches of `batch_size`, and of each this rank's `rank_part`."""

    def __init__(self, sampler: Sampler, batch_size: int, rank: int, world: int):
        self.sampler, self.batch_size, self.rank, self.world = sampler, batch_size, rank, world

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.as_tensor(list(self.sampler), dtype=torch.long)
        for start in range(0, len(order), self.batch_size):
            yield rank_part(order[start:start + self.batch_size], self.rank, self.world).tolist()


class Loader:
    """Batches over a dataset, iterable once per epoch.

    In-memory tensors are sliced directly (no per-item collation) and their per-batch transform
    applied; other datasets go through one DataLoader whose worker processes live across epochs.
    With `world` > 1 each batch is rank `rank`'s part (`rank_part`) of the global batch the
    single-process loader would yield, from the same seeded permutation: the ranks together see
    exactly the single-process batches.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, num_workers: int = 0, pin_memory: bool = False,
                 rank: int = 0, world: int = 1):
        self.dataset, self.batch_size, self.shuffle, self.generator = dataset, batch_size, shuffle, generator
        self.rank, self.world = rank, world
        self._loader = None
        if not isinstance(dataset, TensorDataset) and world == 1:
            self._loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
                                      num_workers=num_workers, pin_memory=pin_memory,
                                      persistent_workers=num_workers > 0)
        elif not isinstance(dataset, TensorDataset):
            # The sampler and the loader share the generator as DataLoader(shuffle=True) does (the
            # loader draws its workers' base seed from it first), so the permutation is the same.
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            self._loader = DataLoader(dataset, batch_sampler=RankBatches(sampler, batch_size, rank, world),
                                      generator=generator, num_workers=num_workers, pin_memory=pin_memory,
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
            if order is None and self.world == 1:
                xb, yb = x[start:start + self.batch_size], y[start:start + self.batch_size]
            else:
                idx = torch.arange(start, min(start + self.batch_size, len(x))) if order is None \
                    else order[start:start + self.batch_size]
                idx = rank_part(idx, self.rank, self.world)
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
