"""The one training step, and the one forward pass, that training and the throughput benchmark run.

`fit()` (the training protocols) and `measure_throughput(mode="train")` (`benchbench profile`, `cost`,
the `measure` protocol) call the same `train_step`, so a measured img/s is the speed of the step
training runs: forward under the precision's autocast, cross-entropy in float32, backward (loss
scaled for fp16), gradient-norm clipping, optimiser step, schedule step.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchbench import execution as execution_policy
from benchbench import precision as precision_policy

# Training defaults that the throughput benchmark takes as well (the scratch protocol's defaults).
CLIP_GRAD_NORM = 1.0


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, precision: str, *,
               clip_grad_norm: float = CLIP_GRAD_NORM, label_smoothing: float = 0.0,
               scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
               world_size: int = 1,
               loss_fn: Callable[[object, torch.Tensor], torch.Tensor] | None = None,
               execution: execution_policy.Execution | None = None) -> Callable[..., torch.Tensor]:
    """step(x, y) -> the batch's loss (a tensor: reading it waits for the device). A precision this
    device does not run (benchbench.precision.check) is a BenchError here, before any step.

    Data-parallel (`world_size` > 1, `model` wrapped by DDP or FSDP, which average gradients over the
    ranks): step(x, y, global_batch) takes this rank's part of a global batch of `global_batch`
    images. Its loss is the sum over its images x world_size / global_batch, so the averaged gradient
    is the gradient of the global batch's mean loss even when the parts differ in size, and clipping
    (after the gradients are averaged) sees the global gradient, as one process would.

    The loss is cross-entropy of the model's logits against `y`; `loss_fn(output, y)` replaces it for a
    model whose output is not logits (masked patch prediction returns its logits with their targets;
    one process only).

    `model` is what the step calls: compiled or not (benchbench.execution.apply); `execution` says which,
    for what a step must do around it (mark a CUDA-graph step's start)."""
    precision = precision_policy.check(device, precision)
    precision_policy.for_precision(model, device, precision)  # fp8: its Linear layers in float8, in place
    scaler = precision_policy.grad_scaler(device, precision)
    execution = execution or execution_policy.EAGER

    def step(x: torch.Tensor, y: torch.Tensor, global_batch: int | None = None) -> torch.Tensor:
        execution_policy.step_begin(execution)
        with precision_policy.autocast(device, precision):
            out = model(x)
        if loss_fn is not None:
            loss = loss_fn(out, y)
        elif world_size == 1:
            loss = F.cross_entropy(out.float(), y, label_smoothing=label_smoothing)
        else:
            loss = F.cross_entropy(out.float(), y, label_smoothing=label_smoothing,
                                   reduction="sum") * (world_size / global_batch)
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


def forward(model: nn.Module, device: torch.device, precision: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """logits(x): one inference forward pass under the precision's autocast, without autograd."""
    precision = precision_policy.check(device, precision)
    precision_policy.for_precision(model, device, precision)

    def logits(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), precision_policy.autocast(device, precision):
            return model(x)

    return logits
