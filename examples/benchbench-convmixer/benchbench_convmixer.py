"""ConvMixer (Trockman & Kolter 2022): a patch embedding followed by depthwise-then-pointwise
convolution blocks; a patch-based CNN between ViT and ResNet. Registered through the entry point
group `benchbench` (see pyproject.toml), like any third-party plugin.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from benchbench import hookimpl
from benchbench.specs import ModelSpec


class Residual(nn.Module):
    def __init__(self, fn: nn.Module):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x) + x


class ConvMixer(nn.Module):
    def __init__(self, dim: int, depth: int, kernel: int, patch: int, *, num_classes: int, in_chans: int):
        super().__init__()
        self.dim = dim
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dim, patch, stride=patch), nn.GELU(), nn.BatchNorm2d(dim))
        self.blocks = nn.Sequential(*(
            nn.Sequential(
                Residual(nn.Sequential(nn.Conv2d(dim, dim, kernel, groups=dim, padding="same"), nn.GELU(),
                                       nn.BatchNorm2d(dim))),
                nn.Conv2d(dim, dim, 1), nn.GELU(), nn.BatchNorm2d(dim),
            ) for _ in range(depth)))
        self.head = nn.Linear(dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logits: global average pool of the last block."""
        return self.blocks(self.stem(x)).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def reset_head(self, num_classes: int) -> None:
        """A zero-initialised head for fine-tuning."""
        self.head = nn.Linear(self.dim, num_classes, device=self.head.weight.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)


def create(dim: int, depth: int, kernel: int, patch: int, *, num_classes: int = 1000, image_size: int = 224,
           in_chans: int = 3) -> ConvMixer:
    if image_size % patch:
        raise ValueError(f"image size {image_size} is not divisible by the patch size {patch}")
    return ConvMixer(dim, depth, kernel, patch, num_classes=num_classes, in_chans=in_chans)


# (id, name, dim, depth, kernel, patch, default resolution)
VARIANTS = (
    ("convmixer-1536-20", "ConvMixer-1536/20", 1536, 20, 9, 7, 224),
    ("convmixer-768-32", "ConvMixer-768/32", 768, 32, 7, 7, 224),
    ("convmixer-64-4-small", "ConvMixer-64/4 (28px)", 64, 4, 5, 2, 28),
)


@hookimpl
def register_models(register) -> None:
    for model_id, name, dim, depth, kernel, patch, resolution in VARIANTS:
        register(ModelSpec(
            id=model_id, name=name, family="convmixer", build=partial(create, dim, depth, kernel, patch),
            default_resolution=resolution, resolution_multiple=patch, aliases=(name,),
            description=f"dim {dim}, depth {depth}, kernel {kernel}, patch {patch}",
        ))
