"""Parameter counts."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from benchbench.meters.cache import cached_per_model, source_stamp
from benchbench.specs import ModelSpec


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def params_at_default(spec: ModelSpec, num_classes: int = 1000) -> int:
    """Parameters of a model at its default resolution, built on the meta device (no memory)."""
    return count_params(spec.build_on_meta(num_classes=num_classes, image_size=spec.default_resolution, in_chans=3))


def _source_stamp(spec: ModelSpec) -> str:
    return source_stamp(spec)


def cached_params_at_default(specs, cache: Path) -> dict[str, int]:
    """`params_at_default` for many specs, remembered in a JSON file (see cached_per_model)."""
    return cached_per_model(specs, cache, lambda spec: params_at_default(spec), stamp=lambda spec: _source_stamp(spec))
