"""Pieces every training protocol shares: batching, settings, optimiser, schedule, the training loop,
evaluation, timing."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from benchbench.data import auto_workers, random_subset
from benchbench.errors import BenchError
from benchbench.settings import non_negative, one_of, positive, unit_interval
from benchbench.specs import Setting

PRECISIONS = ("auto", "fp32", "bf16")


def subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """A seeded random subset of n examples; n <= 0 or n >= len means all of them."""
    return random_subset(dataset, n, seed)


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


def workers(setting: int, dataset: Dataset) -> int:
    """The num_workers setting: -1 picks (none for in-memory data, else up to 4 spare cores)."""
    return auto_workers(dataset) if setting < 0 else setting


# ---------------------------------------------------------------------------------------------
# Precision


def resolve_precision(precision: str, device: torch.device) -> str:
    """auto: bf16 autocast on CUDA, fp32 elsewhere (bf16 on a CPU is allowed, rarely faster)."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return precision


def autocast(device: torch.device, precision: str):
    """Mixed precision for the forward pass: bf16 autocast, or nothing for fp32."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# Settings shared by the training protocols


def at_least(low: int):
    def check(value) -> str | None:
        return None if value >= low else f"must be >= {low}"

    return check


def in_range(low: float, high: float):
    def check(value) -> str | None:
        return None if low <= value <= high else f"must be in [{low}, {high}]"

    return check


def data_settings(**defaults: Any) -> dict[str, Setting]:
    """Settings every protocol that reads images has: resolution, loader workers, precision."""
    out = {
        "resolution": Setting(0, int, "input resolution in px; 0 = the dataset's native size", non_negative),
        "num_workers": Setting(-1, int, "DataLoader worker processes; -1 = auto (0 for in-memory data "
                               "and on <= 2 CPUs, else min(4, CPUs / 2))", at_least(-1)),
        "precision": Setting("auto", str, "auto | fp32 | bf16 (autocast); auto = bf16 on CUDA, else fp32",
                             one_of(*PRECISIONS)),
    }
    for key, value in defaults.items():
        out[key] = Setting(value, out[key].type, out[key].help, out[key].check)
    return out


def train_settings(**defaults: Any) -> dict[str, Setting]:
    """The optimisation settings of `fit`, with protocol-specific defaults."""
    out = {
        "epochs": Setting(1, int, "passes over the training split (ignored when steps > 0)", non_negative),
        "steps": Setting(0, int, "optimiser steps; 0 means use epochs", non_negative),
        "batch_size": Setting(128, int, "training batch size", positive),
        "optimizer": Setting("adamw", str, "adamw | adam | sgd", one_of("adamw", "adam", "sgd")),
        "lr": Setting(1e-3, float, "peak learning rate", positive),
        "weight_decay": Setting(0.05, float, "on weight matrices and kernels only", non_negative),
        "beta2": Setting(0.999, float, "Adam's second-moment decay", unit_interval),
        "momentum": Setting(0.9, float, "SGD momentum", unit_interval),
        "schedule": Setting("cosine", str, "decay after warm-up: cosine | linear", one_of("cosine", "linear")),
        "warmup_fraction": Setting(0.05, float, "fraction of steps with linear warm-up", unit_interval),
        "clip_grad_norm": Setting(1.0, float, "global gradient-norm clip; 0 disables", non_negative),
        "label_smoothing": Setting(0.0, float, "cross-entropy label smoothing", unit_interval),
        "augment": Setting(False, bool, "random crop + flip on training images (flip only for in-memory data)"),
        "train_subset": Setting(0, int, "train on a seeded random subset of this many images; 0 = all", non_negative),
        "train_per_class": Setting(0, int, "train on the first N images of each class after a seeded shuffle; "
                                   "0 = all (not together with train_subset)", non_negative),
        "test_subset": Setting(0, int, "evaluate on a seeded random subset; 0 = the whole test split", non_negative),
        "eval_batch_size": Setting(512, int, "evaluation batch size", positive),
    }
    for key, value in defaults.items():
        out[key] = Setting(value, out[key].type, out[key].help, out[key].check)
    return out


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and kernels only; none on biases, norms, embeddings' scales."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, s: Mapping[str, Any]) -> torch.optim.Optimizer:
    groups = param_groups(model, s["weight_decay"])
    if s["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=s["lr"], momentum=s["momentum"])
    cls = torch.optim.AdamW if s["optimizer"] == "adamw" else torch.optim.Adam
    return cls(groups, lr=s["lr"], betas=(0.9, s["beta2"]))


def warmup_cosine(total_steps: int, warmup_steps: int):
    """Multiplier on the base learning rate: linear warm-up from 0, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def warmup_linear(total_steps: int, warmup_steps: int):
    """Linear warm-up from 0, then linear decay to 0 at `total_steps`."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def make_schedule(total: int, warmup: int, kind: str):
    return (warmup_cosine if kind == "cosine" else warmup_linear)(total, warmup)


def total_steps(s: Mapping[str, Any], train_images: int) -> int:
    return s["steps"] or s["epochs"] * math.ceil(train_images / s["batch_size"])


def fit(model: nn.Module, train: Dataset, s: Mapping[str, Any], device: torch.device, seed: int, *,
        show_progress: bool = False, desc: str = "train") -> dict[str, float]:
    """Train `model` on `train` with the settings of `train_settings`; training metrics, timed."""
    from tqdm import tqdm

    total = total_steps(s, len(train))
    if total <= 0:
        raise BenchError("nothing to train; set epochs >= 1 or steps >= 1")
    gen = torch.Generator().manual_seed(seed)
    loader = Loader(train, s["batch_size"], shuffle=True, generator=gen,
                    num_workers=workers(s.get("num_workers", 0), train), pin_memory=device.type == "cuda")
    model = model.to(device)
    opt = make_optimizer(model, s)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_schedule(total, int(s["warmup_fraction"] * total),
                                                                 s["schedule"]))
    precision = s.get("precision", "fp32")
    step, images, last_loss = 0, 0, float("nan")
    bar = tqdm(total=total, desc=desc, unit="step", leave=False, disable=not show_progress, dynamic_ncols=True,
               mininterval=0.2 if sys.stderr.isatty() else 15.0)  # sparse lines in a log file
    model.train()
    with DeviceClock(device) as clock:
        while step < total:
            for x, y in loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with autocast(device, precision):
                    logits = model(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=s["label_smoothing"])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if s["clip_grad_norm"] > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip_grad_norm"])
                opt.step()
                sched.step()
                step, images = step + 1, images + len(y)
                if step % 20 == 0 or step == total:
                    last_loss = loss.item()  # syncs; so only every 20 steps
                    if not math.isfinite(last_loss):
                        raise FloatingPointError(f"training loss became {last_loss} at step {step}")
                    bar.set_postfix(loss=f"{last_loss:.3f}", img_s=f"{images / clock.elapsed():.0f}", refresh=False)
                bar.update(1)
                if step >= total:
                    break
    bar.close()
    return {
        "train_loss": last_loss,
        "train_examples": len(train),  # distinct training images (the subset's size)
        "train_steps": step,
        "train_images_seen": images,
        "train_device_seconds": clock.seconds,
        "train_img_per_s": images / clock.seconds,
    }


@dataclass(frozen=True)
class Accuracy:
    top1: float
    top5: float
    images: int


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int, *,
             precision: str = "fp32", num_workers: int = 0) -> Accuracy:
    model.eval()
    hit1 = hit5 = n = 0
    for x, y in Loader(dataset, batch_size, num_workers=num_workers, pin_memory=device.type == "cuda"):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast(device, precision):
            logits = model(x)
        k = min(5, logits.shape[1])
        top = logits.float().topk(k, dim=1).indices
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

    def elapsed(self) -> float:
        """Seconds since entering, without waiting for the device (for progress display only)."""
        return max(time.perf_counter() - self._start, 1e-9) if self._start is not None else 1e-9
