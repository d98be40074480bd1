"""How a training model's memory is spread: its repeated units (transformer blocks, residual units),
activation checkpointing on them, and FSDP (torch's fully_shard) over them, built sharded.

Model-agnostic: a unit is a module with children that sits in an `nn.Sequential` or `nn.ModuleList`
beside at least one other module of its class (a ViT's `Block`s, a ResNet's bottlenecks, torchvision's
`EncoderBlock`s and `Bottleneck`s); the outermost such modules are the units. No model declares
anything and no state-dict key changes: checkpointing replaces an instance's `forward`, not the module.
"""

from __future__ import annotations

import functools
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def repeated_units(model: nn.Module) -> list[nn.Module]:
    """The outermost modules (with children) that repeat inside a Sequential or ModuleList, in order."""
    units: list[nn.Module] = []
    inside: set[int] = set()  # ids of modules under a unit already taken
    for module in model.modules():
        if id(module) in inside or not isinstance(module, (nn.Sequential, nn.ModuleList)):
            continue
        counts = Counter(type(child) for child in module)
        for child in module:
            if counts[type(child)] >= 2 and any(True for _ in child.children()) \
                    and not isinstance(child, (nn.Sequential, nn.ModuleList)):
                units.append(child)
                inside.update(id(m) for m in child.modules())
    return units


@contextmanager
def activation_checkpointing(model: nn.Module, enabled: bool = True) -> Iterator[int]:
    """Within the block, each repeated unit's activations are recomputed in the backward pass instead
    of kept (torch.utils.checkpoint, non-reentrant: same gradients, same random numbers). Yields the
    number of units; a model without any is left as it is (0)."""
    units = repeated_units(model) if enabled else []
    for unit in units:
        unit.forward = functools.partial(checkpoint, type(unit).forward.__get__(unit), use_reentrant=False)
    try:
        yield len(units)
    finally:
        for unit in units:
            del unit.forward  # back to the class's forward


def fully_shard_units(model: nn.Module) -> int:
    """FSDP2 on each repeated unit, then on the whole model (which holds the rest: embeddings, head):
    a unit's full weights exist only while it runs. Returns the number of units sharded."""
    from torch.distributed.fsdp import fully_shard

    units = repeated_units(model)
    for unit in units:
        fully_shard(unit)
    fully_shard(model)
    return len(units)


def build_sharded(build: Callable[[], nn.Module], weights: str | Path, buffers: str | Path,
                  device: torch.device) -> nn.Module:
    """`build()` sharded by FSDP without ever holding the whole model: built on the meta device,
    `fully_shard_units`, materialised on `device` as this rank's shards only, then each shard copied
    from the full weights in `weights` (a state dict file, memory-mapped, so a rank reads its own
    rows of each tensor and no more) and every buffer (persistent or not: not sharded, small) from
    `buffers` ({name: tensor} of the model's `named_buffers()`). A process group must be up."""
    from torch.distributed.tensor import distribute_tensor

    with torch.device("meta"):
        model = build()
    fully_shard_units(model)
    model.to_empty(device=device)
    full = torch.load(weights, mmap=True, weights_only=True)
    with torch.no_grad():
        for name, param in model.named_parameters():
            # no communication (src_data_rank=None): every rank has the file and slices its own shard
            shard = distribute_tensor(full[name], param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(shard.to_local())
        for name, value in torch.load(buffers, weights_only=True).items():
            model.get_buffer(name).copy_(value)
    return model
