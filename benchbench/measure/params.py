"""Parameter counts."""

from __future__ import annotations

from torch import nn


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
