"""Pieces every training protocol shares: batching, optimiser, schedule, evaluation, timing."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset


def subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """A seeded random subset of n examples; n <= 0 or n >= len means all of them."""
    if n <= 0 or n >= len(dataset):
        return dataset
    idx = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    if isinstance(dataset, TensorDataset):  # stay on the fast path
        return TensorDataset(*(t[idx] for t in dataset.tensors))
    return Subset(dataset, idx.tolist())


def batches(
    dataset: Dataset, batch_size: int, *, shuffle: bool = False, generator: torch.Generator | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One pass over the data. In-memory tensors are sliced directly (no per-item collation)."""
    if isinstance(dataset, TensorDataset):
        x, y = dataset.tensors
        order = torch.randperm(len(x), generator=generator) if shuffle else None
        for start in range(0, len(x), batch_size):
            if order is None:
                yield x[start:start + batch_size], y[start:start + batch_size]
            else:
                idx = order[start:start + batch_size]
                yield x[idx], y[idx]
        return
    yield from DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and kernels only; none on biases, norms, embeddings' scales."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(total_steps: int, warmup_steps: int):
    """Multiplier on the base learning rate: linear warm-up from 0, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


@dataclass(frozen=True)
class Accuracy:
    top1: float
    top5: float
    images: int


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int) -> Accuracy:
    model.eval()
    hit1 = hit5 = n = 0
    for x, y in batches(dataset, batch_size):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        k = min(5, logits.shape[1])
        top = logits.topk(k, dim=1).indices
        correct = top.eq(y[:, None])
        hit1 += int(correct[:, 0].sum())
        hit5 += int(correct.any(dim=1).sum())
        n += len(y)
    if n == 0:
        raise ValueError("evaluation split is empty")
    return Accuracy(top1=hit1 / n, top5=hit5 / n, images=n)


class DeviceClock:
    """Wall time of work on a device; waits for queued CUDA work before reading the clock."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds = 0.0
        self._start: float | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> "DeviceClock":
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self._sync()
        self.seconds += time.perf_counter() - self._start
