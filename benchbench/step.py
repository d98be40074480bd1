"""The one training step, and the one forward pass, that training and the throughput benchmark run.

`fit()` (the training protocols) and `measure_throughput(mode="train")` (`benchbench profile`, `cost`,
the `measure` protocol) call the same `train_step`, so a measured img/s is the speed of the step
training runs: forward under the precision's autocast, the loss in float32 (cross-entropy unless a
protocol gives its own), backward (loss scaled for fp16), gradient-norm clipping, optimiser step,
schedule step.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchbench import execution as execution_policy
from benchbench.precision import Precision

# Training defaults that the throughput benchmark takes as well (the scratch protocol's defaults).
CLIP_GRAD_NORM = 1.0

# loss(output, labels, global_batch): `global_batch` is None in one process; data-parallel, the images
# of the global batch this rank's part belongs to.
Loss = Callable[[object, torch.Tensor, "int | None"], torch.Tensor]


def cross_entropy(label_smoothing: float = 0.0, world_size: int = 1) -> Loss:
    """Cross-entropy of logits against labels, in float32. Data-parallel (`world_size` > 1, the model
    wrapped by DDP or FSDP, which average gradients over the ranks): this rank's part of a global
    batch sums its images' losses x world_size / global_batch, so the averaged gradient is the
    gradient of the global batch's mean loss even when the parts differ in size, and clipping (after
    the gradients are averaged) sees the global gradient, as one process would."""

    def loss(out: torch.Tensor, y: torch.Tensor, global_batch: int | None = None) -> torch.Tensor:
        if world_size == 1:
            return F.cross_entropy(out.float(), y, label_smoothing=label_smoothing)
        return F.cross_entropy(out.float(), y, label_smoothing=label_smoothing,
                               reduction="sum") * (world_size / global_batch)

    return loss


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision, *,
               execution: execution_policy.Execution | None = None,
               scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, loss_fn: Loss | None = None,
               clip_grad_norm: float = CLIP_GRAD_NORM, uncompiled: nn.Module | None = None
               ) -> Callable[..., torch.Tensor]:
    """step(x, y[, global_batch][, eager=False]) -> the batch's loss (a tensor: reading it waits for the
    device).

    `loss_fn` (default: `cross_entropy()`) replaces the loss for a model whose output is not logits
    (masked patch prediction returns its logits with their targets), or for a data-parallel rank
    (`cross_entropy(world_size=...)`, called with the global batch). `model` is what the step calls:
    compiled or not (benchbench.execution.apply); `execution` says which, for what a step must do
    around it (mark a CUDA-graph step's start). A step with `eager=True` calls `uncompiled` instead
    (the module `model` compiles, sharing its weights), with the same optimiser, scaler and schedule:
    a batch of another shape than the compiled graph's runs so without compiling a second graph."""
    precision.for_model(model)  # fp8: its Linear layers in float8, in place
    scaler = precision.grad_scaler()
    execution = execution or execution_policy.EAGER
    loss_fn = loss_fn or cross_entropy()

    def step(x: torch.Tensor, y: torch.Tensor, global_batch: int | None = None, eager: bool = False) -> torch.Tensor:
        module = uncompiled if eager and uncompiled is not None else model
        if module is model:
            execution_policy.step_begin(execution)
        with precision.autocast():
            out = module(x)
        loss = loss_fn(out, y, global_batch)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            if clip_grad_norm > 0:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        return loss

    return step


def forward(model: nn.Module, precision: Precision) -> Callable[[torch.Tensor], torch.Tensor]:
    """logits(x): one inference forward pass under the precision's autocast, without autograd."""
    precision.for_model(model)

    def logits(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), precision.autocast():
            return model(x)

    return logits
