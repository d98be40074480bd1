"""Batches for training, evaluation and feature extraction: in-memory tensors sliced, files through
one DataLoader whose worker processes live across epochs; in data-parallel runs, each rank's part
of every global batch, augmented as the single-process batch is.

Given the device, in-memory tensors that fit (`fits_on_device`) are moved there once and every batch
is indexed there, the permutation too: no host-to-device copy per step, which is what bounds a tiny
model on a GPU. The batches are the same tensors wherever they are indexed.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler, TensorDataset

from benchbench.runtime.threads import budget

SEED_RANGE = 2 ** 62  # per-image augmentation seeds are drawn from [0, SEED_RANGE)


def rank_part(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s contiguous part of one global batch of indices: `world` parts whose sizes differ
    by at most one (the first len % world parts one larger), together the whole batch, no overlap."""
    return batch if world == 1 else batch.tensor_split(world)[rank]


# In-memory data goes to the device when its bytes are at most this fraction of the device's free
# memory: the rest is left to the model, its activations and the optimiser's state.
RESIDENT_FRACTION = 0.25


def data_bytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def fits_on_device(nbytes: int, device: torch.device, free_bytes: int | None = None) -> bool:
    """Whether `nbytes` of in-memory data are held on `device`: always on the CPU (where they already
    are; the move is a no-op), on CUDA when at most RESIDENT_FRACTION of its free memory (`free_bytes`,
    read from the device when None); never on another device type (whose free memory is not known)."""
    device = torch.device(device)
    if device.type == "cpu":
        return True
    if free_bytes is None:
        if device.type != "cuda":
            return False
        free_bytes = torch.cuda.mem_get_info(device)[0]
    return nbytes <= RESIDENT_FRACTION * free_bytes


def _transform_to(transform, device: torch.device):
    """The per-batch transform for batches on `device` (its own `to` where it has one)."""
    return transform.to(device) if transform is not None and hasattr(transform, "to") else transform


class RankBatches(Sampler):
    """Index batches for one rank: the order of `sampler` (a seeded permutation, or 0..n-1) cut into
    global batches of `batch_size`, and of each this rank's `rank_part`. With `seeds` (a generator),
    each index comes with a seed drawn for the whole global batch from it, (index, seed) pairs for
    `SeededItems`: image i of the global batch gets the same seed whichever rank loads it."""

    def __init__(self, sampler: Sampler, batch_size: int, rank: int, world: int,
                 seeds: torch.Generator | None = None):
        self.sampler, self.batch_size, self.rank, self.world, self.seeds = sampler, batch_size, rank, world, seeds

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[list]:
        order = torch.as_tensor(list(self.sampler), dtype=torch.long)
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            part = rank_part(batch, self.rank, self.world).tolist()
            if self.seeds is None:
                yield part
            else:
                seeds = torch.randint(SEED_RANGE, (len(batch),), generator=self.seeds)
                yield list(zip(part, rank_part(seeds, self.rank, self.world).tolist()))



class SeededItems(Dataset):
    """`dataset[index]` for keys (index, seed), with torch's global generator seeded by `seed` while
    the item is read (and restored after): a random transform inside the dataset (a crop, a flip)
    draws the same numbers for that image in any process, worker or rank."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        index, seed = key
        state = torch.default_generator.get_state()
        torch.default_generator.manual_seed(seed)
        try:
            return self.dataset[index]
        finally:
            torch.default_generator.set_state(state)


class Loader:
    """Batches over a dataset, iterable once per epoch.

    In-memory tensors are sliced directly (no per-item collation) and their per-batch transform
    applied; other datasets go through one DataLoader whose worker processes live across epochs.
    With `world` > 1 each batch is rank `rank`'s part (`rank_part`) of the global batch the
    single-process loader would yield, from the same seeded permutation: the ranks together see
    exactly the single-process batches.

    With `augment_seed`, the augmentation's random numbers come from a generator seeded by it,
    drawn for each global batch whole (so they do not depend on the number of ranks, nor on worker
    processes): in memory the transform's `draws` for the global batch, of which each rank takes its
    part; for files a seed per image of the global batch, with which its transform runs
    (`SeededItems`). Without it, augmentation draws from torch's global generator.

    With `device`, in-memory tensors that fit (`fits_on_device`) are moved there once, here, and
    batches (and the permutation, drawn from `generator` on the host) are indexed there;
    `resident` says whether they were. File datasets keep the DataLoader and its `pin_memory`.
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, shuffle: bool = False,
                 generator: torch.Generator | None = None, num_workers: int = 0, pin_memory: bool = False,
                 rank: int = 0, world: int = 1, augment_seed: int | None = None,
                 device: torch.device | str | None = None):
        self.dataset, self.batch_size, self.shuffle, self.generator = dataset, batch_size, shuffle, generator
        self.rank, self.world = rank, world
        self.augment = None if augment_seed is None else torch.Generator().manual_seed(augment_seed)
        self._loader = None
        self.resident = False
        if isinstance(dataset, TensorDataset):
            self._tensors = dataset.tensors[:2]
            self._transform = getattr(dataset, "transform", None)
            if device is not None and fits_on_device(data_bytes(self._tensors), torch.device(device)):
                self._tensors = tuple(t.to(device) for t in self._tensors)
                self._transform = _transform_to(self._transform, torch.device(device))
                self.resident = True
        if not isinstance(dataset, TensorDataset) and world == 1 and self.augment is None:
            self._loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
                                      num_workers=num_workers, pin_memory=pin_memory,
                                      persistent_workers=num_workers > 0)
        elif not isinstance(dataset, TensorDataset):
            # The sampler and the loader share the generator as DataLoader(shuffle=True) does (the
            # loader draws its workers' base seed from it first), so the permutation is the same.
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            batches = RankBatches(sampler, batch_size, rank, world, self.augment)
            self._loader = DataLoader(dataset if self.augment is None else SeededItems(dataset),
                                      batch_sampler=batches, generator=generator, num_workers=num_workers,
                                      pin_memory=pin_memory, persistent_workers=num_workers > 0)

    def __len__(self) -> int:
        return math.ceil(len(self.dataset) / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yield from self._batches()

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._loader is not None:
            yield from self._loader
            return
        x, y = self._tensors
        transform = self._transform
        random = None if self.augment is None else getattr(transform, "draws", None)
        # Drawn on the host from the generator as ever (the same permutation on every device), then
        # moved once per epoch to where the data is.
        order = torch.randperm(len(x), generator=self.generator).to(x.device) if self.shuffle else None
        for start in range(0, len(x), self.batch_size):
            draws = None
            if order is None and self.world == 1 and random is None:
                xb, yb = x[start:start + self.batch_size], y[start:start + self.batch_size]
            else:
                idx = torch.arange(start, min(start + self.batch_size, len(x)), device=x.device) if order is None \
                    else order[start:start + self.batch_size]
                if random is not None:
                    draws = random(len(idx), self.augment)
                    draws = None if draws is None else rank_part(draws, self.rank, self.world)
                idx = rank_part(idx, self.rank, self.world)
                xb, yb = x[idx], y[idx]
            if transform is not None:
                xb = transform(xb) if draws is None else transform(xb, draws)
            yield xb, yb


def batches(
    dataset: Dataset, batch_size: int, *, shuffle: bool = False, generator: torch.Generator | None = None,
    num_workers: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One pass over the data (see `Loader`)."""
    return iter(Loader(dataset, batch_size, shuffle=shuffle, generator=generator, num_workers=num_workers))


def auto_workers(dataset: Dataset) -> int:
    """DataLoader workers when a protocol's num_workers is -1: none for in-memory tensors (a batch is a
    slice); for files, none on one or two CPUs (measured: a worker there takes cores from the
    training step and costs more than it saves, benchmarks/loader_speed.py), else half the CPUs, up
    to 4. The CPUs are the process's budget (benchbench.runtime.threads: affinity, quota, allocation)."""
    if isinstance(dataset, TensorDataset):
        return 0
    cpus = budget().cpus
    return 0 if cpus <= 2 else min(4, cpus // 2)


def workers(setting: int, dataset: Dataset) -> int:
    """The num_workers setting: -1 picks (see auto_workers)."""
    return auto_workers(dataset) if setting < 0 else setting
