"""The examples a protocol trains and evaluates on: seeded random and per-class subsets, labels."""

from __future__ import annotations

import copy

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from benchbench.errors import BenchError


def labels_of(dataset: Dataset) -> torch.Tensor:
    """All labels of a dataset as a long tensor, without decoding images where the dataset keeps them."""
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[1].long()
    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    for attr in ("targets", "_labels", "labels"):  # torchvision's classes keep them under these names
        values = getattr(dataset, attr, None)
        if values is not None and not callable(values) and len(values) == len(dataset):
            return torch.as_tensor(values, dtype=torch.long)
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))], dtype=torch.long)


def take(dataset: Dataset, indices) -> Dataset:
    """The examples at `indices`, staying on the in-memory fast path where there is one."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    if isinstance(dataset, TensorDataset):  # a copy keeps the class and its per-batch transform
        out = copy.copy(dataset)
        out.tensors = tuple(t[idx] for t in dataset.tensors)
        out.split_positions = split_positions(dataset)[idx]  # the copy forgets where its examples came from
        return out
    return Subset(dataset, idx.tolist())


def split_positions(dataset: Dataset) -> torch.Tensor:
    """Each example's index in the split it was taken from (through `take` and Subset), as a long tensor."""
    if isinstance(dataset, Subset):
        return split_positions(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    kept = getattr(dataset, "split_positions", None)
    return kept if kept is not None else torch.arange(len(dataset))


def random_subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """A seeded random subset of n examples; n <= 0 or n >= len means all of them."""
    if n <= 0 or n >= len(dataset):
        return dataset
    return take(dataset, torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n])


def per_class_indices(labels: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Indices of the first n examples of each class after a seeded shuffle, in dataset order.

    A class with fewer than n examples contributes all of them. With the same seed, the subset for
    n is contained in the subset for any larger n (the draws are nested).
    """
    labels = torch.as_tensor(labels, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    shuffled = labels[order]
    keep = [order[shuffled == c][:n] for c in torch.unique(labels).tolist()]
    return torch.sort(torch.cat(keep)).values if keep else torch.zeros(0, dtype=torch.long)


def per_class_subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """The first n examples per class after a seeded shuffle; n <= 0 means all of them."""
    if n <= 0:
        return dataset
    return take(dataset, per_class_indices(labels_of(dataset), n, seed))


def training_subset(dataset: Dataset, *, per_class: int, total: int, seed: int) -> Dataset:
    """The training examples a protocol uses: `per_class` per class, or `total` at random, or all."""
    if per_class > 0 and total > 0:
        raise BenchError("set at most one of train_per_class and train_subset (both are > 0)")
    if per_class > 0:
        return per_class_subset(dataset, per_class, seed)
    return random_subset(dataset, total, seed)
