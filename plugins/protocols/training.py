"""Training and evaluation as the training protocols run them: optimiser, schedule, `fit` (the loop
around benchbench.step.train_step) and `evaluate`, for one process: the cell's, or each rank of a
data-parallel cell (plugins/protocols/distributed.py). A cell's whole run is cell_training.py."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from benchbench.meters import compile_costs
from benchbench import execution as execution_policy
from benchbench.runtime.clock import DeviceClock, sync
from benchbench.meters import energy
from benchbench.errors import BenchError
from benchbench.execution import Execution
from benchbench.precision import DEFAULT, Precision, resolve
from benchbench.store.predictions import METRIC as PREDICTIONS
from benchbench.store.predictions import Predictions
from benchbench.specs import DataOptions, DatasetSpec, ProtocolContext
from benchbench.judge.stats import ece
from benchbench.step import Loss, cross_entropy, forward, train_step
from benchbench_plugins.protocols.features import scored
from benchbench_plugins.protocols.inference import at_largest_batch, eval_batch_sizes
from benchbench_plugins.protocols.loader import Loader, rank_part, workers
from benchbench_plugins.protocols.subsets import random_subset, split_positions, training_subset
from benchbench_plugins.protocols.training_settings import split_sizes

AUGMENT_SEED_OFFSET = 7_919  # the augmentation generator's seed: the cell's seed + this


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and kernels only; none on biases, norms, embeddings' scales."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, s: Mapping[str, Any], *,
                   execution: Execution = execution_policy.EAGER) -> torch.optim.Optimizer:
    """The settings' optimiser, with the kernel `execution` chose (fused: the same update, one kernel
    for all weights)."""
    groups = param_groups(model, s["weight_decay"])
    kernel = execution_policy.optimizer_options(execution)
    if s["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=s["lr"], momentum=s["momentum"], **kernel)
    cls = torch.optim.AdamW if s["optimizer"] == "adamw" else torch.optim.Adam
    return cls(groups, lr=s["lr"], betas=(0.9, s["beta2"]), **kernel)


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


def precision_of(ctx: ProtocolContext) -> Precision:
    """The cell's precision (resolved once by the runner); benchbench.precision's default where the
    protocol declares none."""
    return ctx.precision if ctx.precision is not None else resolve(DEFAULT, ctx.device)


def fit(model: nn.Module, train: Dataset, ctx: ProtocolContext, *, desc: str = "train", rank: int = 0,
        loss_fn: Loss | None = None) -> dict[str, Any]:
    """Train `model` on `train` with the cell's settings (`ctx.settings`: the optimisation settings of
    `train_settings`), precision and execution; training metrics, timed.

    `ctx.execution` (resolved once for the cell; None: eager, and no `exec_*` metrics) says whether the
    model is compiled, the optimiser fused, the memory channels-last, and why; the metrics record it.
    Compiled, the compiled module meets one batch shape, the full batch's: an epoch's short last batch
    runs through `model` itself (the same weights, optimiser and schedule, uncompiled), so nothing
    recompiles mid-cell, and the eager run of the same cell trains on exactly the same batches. The
    first compiled step compiles: it is timed apart, synchronised, as `compile_s` (compilation plus its
    own work), and left out of `train_device_seconds` and `train_img_per_s`, which are the steady pace
    (unless every step compiled: then they count all); what it took, in which state of inductor's
    on-disk cache, and the steady step's time are remembered for the next cell's break-even
    (benchbench.meters.compile_costs). A compile that fails fails the cell, unless the execution was the
    policy's choice (`compile = "auto"`): then the cell trains on eagerly, and says why. `loss_fn`
    replaces cross-entropy (benchbench.step).

    Data-parallel (`ctx.world` of more than one process, `model` wrapped by DDP or FSDP, a process group
    up, this process rank `rank`): this rank trains on its part of each global batch of `batch_size`
    (plugins/protocols/loader.py); the steps, the permutation, the augmentation's random numbers
    (`augment`: drawn per global batch) and the metrics (global images, the loss of the global batch)
    are one process's; every rank runs a short global batch uncompiled."""
    from tqdm import tqdm

    s, device, seed = ctx.settings, ctx.device, ctx.seed
    world = ctx.world.size if ctx.world is not None else 1
    total = total_steps(s, len(train))
    if total <= 0:
        raise BenchError("nothing to train; set epochs >= 1 or steps >= 1")
    gen = torch.Generator().manual_seed(seed)
    batch_size = s["batch_size"]
    # augmentation draws from its own generator (the permutation's stream stays as it was), per global batch
    augment_seed = seed + AUGMENT_SEED_OFFSET if s.get("augment", False) else None
    loader = Loader(train, batch_size, shuffle=True, generator=gen, num_workers=workers(s.get("num_workers", 0), train),
                    pin_memory=device.type == "cuda", rank=rank, world=world, augment_seed=augment_seed,
                    device=device)
    model = model.to(device)
    execution = ctx.execution or execution_policy.EAGER
    precision = precision_of(ctx)
    runner = execution_policy.apply(model, execution)
    opt = make_optimizer(model, s, execution=execution)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_schedule(total, int(s["warmup_fraction"] * total),
                                                                 s["schedule"]))
    step = train_step(runner, opt, precision, execution=execution, scheduler=sched, clip_grad_norm=s["clip_grad_norm"],
                      loss_fn=loss_fn or cross_entropy(s["label_smoothing"], world), uncompiled=model)
    done, images, last_loss = 0, 0, float("nan")
    compiling = execution.compile  # until the first compiled step has run
    compile_s, compile_images, cache = 0.0, 0, None
    bar = tqdm(total=total, desc=desc, unit="step", leave=False, disable=not ctx.show_progress or rank != 0,
               dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 15.0)  # sparse lines in a log file
    if execution.note and rank == 0:
        print(f"note: {desc}: {execution.note}", file=sys.stderr)
    model.train()
    with precision.matmul_mode(), DeviceClock(device) as clock, energy.span(ctx, "training", rank) as joules:
        while done < total:
            for i, (x, y) in enumerate(loader):
                x, y = execution_policy.to_device(x, device, execution), y.to(device, non_blocking=True)
                n = len(y) if world == 1 else min(batch_size, len(train) - i * batch_size)  # the global batch's
                short = n < batch_size  # an epoch's last batch: never through the compiled graph
                args = (x, y) if world == 1 else (x, y, n)
                if compiling and not short:
                    bar.set_description_str(f"{desc} ({compiling_line(execution)})", refresh=True)
                    sync(device)
                    start, counts = time.perf_counter(), compile_costs.cache_counts()
                    try:
                        loss = step(*args)
                        sync(device)
                    except Exception as exc:  # noqa: BLE001 - only a compile error under "auto" is caught
                        if not (compile_error(exc) and s.get(execution_policy.COMPILE, "auto") == "auto"):
                            raise
                        execution, loss = fallen_back(execution, exc), None
                    compile_s += time.perf_counter() - start
                    cache = compile_costs.cache_state(counts, compile_costs.cache_counts())
                    compiling = False
                    bar.set_description_str(desc, refresh=False)
                    if loss is None:  # the compile failed: this batch again, eagerly (and every later one)
                        loss = step(*args, eager=True)
                    else:
                        compile_images += n
                else:
                    loss = step(*args, eager=short or not execution.compile)
                done, images = done + 1, images + n
                if done % 20 == 0 or done == total:
                    last_loss = loss.item() if world == 1 else _mean_over_ranks(loss, world)  # syncs: every 20
                    if not math.isfinite(last_loss):
                        raise FloatingPointError(f"training loss became {last_loss} at step {done}")
                    bar.set_postfix(loss=f"{last_loss:.3f}", img_s=f"{images / clock.elapsed():.0f}", refresh=False)
                bar.update(1)
                if done >= total:
                    break
    bar.close()
    steady_s, steady_images = clock.seconds - compile_s, images - compile_images
    if steady_images == 0:  # every step compiled: nothing else to time
        steady_s, steady_images = clock.seconds, images
    if rank == 0 and ctx.execution is not None:
        _remember(ctx, model, execution, compiled_s=compile_s if cache is not None and execution.compile else None,
                  cache=cache, image_s=steady_s / steady_images if steady_images < images or not execution.compile
                  else None)
    expected = {"compile_s_expected": execution.expected_compile_s} if execution.expected_compile_s else {}
    return {
        "train_loss": last_loss,
        "train_examples": len(train),  # the training set's size: the (sub)set batches are drawn from
        "train_steps": done,
        "train_images_seen": images,  # every image of every step (an epoch's last batch may be short)
        # each epoch is a permutation of the set, so the first len(train) images seen are all distinct
        "train_distinct_images": min(images, len(train)),
        "train_epochs": images / len(train),
        "train_device_seconds": steady_s,
        "train_img_per_s": steady_images / steady_s,
        **({"compile_s": compile_s, **expected, **execution.metrics()} if ctx.execution is not None else {}),
        **joules.metrics(),  # energy_train_j where the cell's energy counters were read (compiling steps too)
    }


def compiling_line(execution: Execution) -> str:
    """What the progress line says while the first compiled step runs."""
    about = execution.expected_compile_s
    return "compiling, first step" + (f", about {execution_policy.seconds(about)}" if about else "")


def compile_error(exc: BaseException) -> bool:
    """Whether `exc` is torch.compile's failing (Dynamo's or inductor's), not the step's own error."""
    from torch._dynamo.exc import TorchDynamoException

    module = type(exc).__module__ or ""
    return isinstance(exc, TorchDynamoException) or module.startswith(("torch._inductor", "torch._dynamo"))


def fallen_back(execution: Execution, exc: BaseException) -> Execution:
    """`execution` run eagerly after its compile failed with `exc`, its reason saying so."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    why = f"{type(exc).__name__}: {' '.join(lines[:2])}"[:300]  # e.g. "backend='inductor' raised: <its error>"
    return replace(execution, compile=False, compile_mode=None, expected_compile_s=None,
                   reason=f"eager: compiling failed ({why}); the choice was: {execution.reason}")


def _remember(ctx: ProtocolContext, model: nn.Module, execution: Execution, *, compiled_s: float | None,
              cache: str | None, image_s: float | None) -> None:
    """This cell's compile time and steady step time, for the break-even of later cells
    (benchbench.meters.compile_costs)."""
    core = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    work = compile_costs.workload(ctx.model_spec, core, ctx.device, compile_costs.Steps(
        precision=precision_of(ctx).name, resolution=ctx.data.image_size, in_chans=ctx.data.in_chans,
        num_classes=ctx.dataset_spec.num_classes, batch_size=ctx.settings["batch_size"],
        world=ctx.world.size if ctx.world is not None else 1))
    if compiled_s:
        compile_costs.remember_compile(work, execution, compiled_s, cache or "cold")
    if image_s:
        compile_costs.remember_step(work, execution, image_s)


def _mean_over_ranks(loss: torch.Tensor, world: int) -> float:
    """The global batch's mean loss from each rank's share of it (see benchbench.step.train_step)."""
    total = loss.detach().float().clone()
    dist.all_reduce(total)
    return total.item() / world


@dataclass(frozen=True)
class Accuracy:
    top1: float
    top5: float
    images: int
    batch_size: int = 0  # the batch size the counts were taken at (see inference.eval_batch_sizes)
    predictions: Predictions | None = None  # per image, where kept


def evaluate(model: nn.Module, dataset: Dataset, device: torch.device, batch_size: int, *,
             precision: Precision, num_workers: int = 0, rank: int = 0, world: int = 1,
             keep_predictions: bool = False) -> Accuracy:
    """Top-1/top-5 over `dataset`; data-parallel (`world` > 1), each rank evaluates its part of each
    batch (every rank the same number of forward passes, as FSDP needs) and the counts are summed.
    With `keep_predictions`, also each image's predictions (benchbench.store.predictions); data-parallel,
    every rank's part gathered (a collective) and put back in dataset order on every rank.

    The counts, and the kept predictions, stay on the device and are read once at the end (a read per
    batch would wait for the device each time); the batch size is `batch_size`, or larger on CUDA
    (inference.py)."""
    model.eval()
    logits_of = forward(model, precision)
    sizes = eval_batch_sizes(batch_size, len(dataset), device, world)
    with precision.matmul_mode():
        (counts, kept), size = at_largest_batch(
            sizes, lambda size: _count_hits(logits_of, dataset, device, size, num_workers, rank, world,
                                            keep_predictions))
    if world > 1:
        dist.all_reduce(counts)
    hit1, hit5, n, not_finite = counts.tolist()
    if n == 0:
        raise ValueError("evaluation split is empty")
    if not_finite:  # an accuracy of NaN logits means nothing: the cell fails
        raise FloatingPointError(f"the model's outputs were not finite (NaN or infinite) for {not_finite} of {n} "
                                 "images during evaluation")
    preds = None
    if keep_predictions:
        parts = tuple(t.cpu().numpy() for t in kept) if kept is not None else None
        if world > 1:
            parts = _gathered(parts, len(dataset), size, world)
        if parts is not None:
            top, p_true, p_top1, y = parts
            preds = Predictions(split_positions(dataset).numpy(), y, top, p_true, p_top1)
    return Accuracy(top1=hit1 / n, top5=hit5 / n, images=n, batch_size=size, predictions=preds)


def _gathered(parts: tuple[np.ndarray, ...] | None, n: int, batch_size: int, world: int
              ) -> tuple[np.ndarray, ...] | None:
    """Every rank's kept predictions (its `rank_part` of each batch of `batch_size`) in dataset order."""
    every: list = [None] * world
    dist.all_gather_object(every, parts)
    if not any(p is not None for p in every):
        return None
    batches = torch.arange(n).split(batch_size)
    template = next(p for p in every if p is not None)
    out = [np.empty((n, *a.shape[1:]), dtype=a.dtype) for a in template]
    for r, got in enumerate(every):
        where = torch.cat([rank_part(b, r, world) for b in batches]).numpy()
        if got is None:
            continue
        for full, mine in zip(out, got):
            full[where] = mine
    return tuple(out)


def _count_hits(logits_of, dataset: Dataset, device: torch.device, batch_size: int, num_workers: int,
                rank: int, world: int, keep: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """(top-1 hits, top-5 hits, images, images with a non-finite output) over `dataset` as one long tensor
    on `device`; with `keep`, also per image, in dataset order: (top-5 class ids, p_true, p_top1, label)
    on `device`."""
    counts = torch.zeros(4, dtype=torch.long, device=device)
    kept: list[tuple[torch.Tensor, ...]] = []
    loader = Loader(dataset, batch_size, num_workers=num_workers, pin_memory=device.type == "cuda",
                    rank=rank, world=world, device=device)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = logits_of(x)
        if keep:
            top, p_true, p_top1 = scored(logits, y)
            kept.append((top.to(torch.int32), p_true, p_top1, y))
        else:
            top = logits.float().topk(min(5, logits.shape[1]), dim=1).indices
        correct = top.eq(y[:, None])
        counts[0] += correct[:, 0].sum()
        counts[1] += correct.any(dim=1).sum()
        counts[2] += len(y)
        counts[3] += (~torch.isfinite(logits)).any(dim=1).sum()
    return counts, (tuple(torch.cat(parts) for parts in zip(*kept)) if kept else None)


def cell_splits(spec: DatasetSpec, data: DataOptions, s: Mapping[str, Any], seed: int) -> tuple[Dataset, Dataset]:
    """A training cell's (train, test) data: its subset settings, training images augmented when asked."""
    train = training_subset(spec.load("train", replace(data, augment=s["augment"])),
                            per_class=s["train_per_class"], total=s["train_subset"], seed=seed)
    return train, random_subset(spec.load("test", data), s["test_subset"], seed + 1)


def evaluate_timed(model: nn.Module, test: Dataset, ctx: ProtocolContext, *, rank: int = 0) -> dict[str, float]:
    """`evaluate` on the device clock, at the cell's precision, as a cell's metrics, with each image's
    predictions under `benchbench.store.predictions.METRIC` (a file beside the record) and
    their expected calibration error `ece` (benchbench.judge.stats.ece)."""
    s = ctx.settings
    world = ctx.world.size if ctx.world is not None else 1
    with DeviceClock(ctx.device) as eval_clock, energy.span(ctx, "evaluation", rank) as joules:
        acc = evaluate(model, test, ctx.device, s["eval_batch_size"], precision=precision_of(ctx),
                       num_workers=workers(s["num_workers"], test), rank=rank, world=world,
                       keep_predictions=True)
    out: dict[str, Any] = dict(top1=acc.top1, top5=acc.top5, eval_images=acc.images,
                               eval_device_seconds=eval_clock.seconds, eval_batch_size_used=acc.batch_size,
                               **joules.metrics())
    if acc.predictions is not None:
        out[PREDICTIONS] = acc.predictions
        out["ece"] = ece(acc.predictions.p_top1, acc.predictions.hits())
    return out


def estimate(settings: Mapping[str, Any], dataset_spec: DatasetSpec) -> dict[str, float]:
    """A training protocol's images: trained on (forward + backward) and evaluated, from the settings
    and the dataset's split sizes."""
    n_train, n_test = split_sizes(settings, dataset_spec)
    out: dict[str, float] = {}
    if settings["steps"] > 0:
        out["train_images"] = float(settings["steps"] * settings["batch_size"])
    elif n_train is not None:
        out["train_images"] = float(settings["epochs"] * n_train)
    if n_test is not None:
        out["eval_images"] = float(n_test)
    return out
