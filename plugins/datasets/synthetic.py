"""`synthetic`: seeded random images for compute-only runs (no files, no download).

Image i of a split is a fixed random pattern of its class (i mod 10) plus Gaussian noise, both drawn
from generators seeded by (split, class) and (split, i): deterministic per index, in any order and
in any worker. Learnable, so a short run shows training works, but says nothing about real data.
Made directly at the cell's resolution and channels (default 224 px, 3 channels).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from benchbench import hookimpl
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.locate import check_split
from benchbench_plugins.datasets.transforms import target_size

ID = "synthetic"
SPLITS = ("train", "test")
SIZES = {"train": 50_000, "test": 10_000}
NUM_CLASSES, NATIVE, CHANNELS = 10, 224, 3
SPLIT_SEED = {"train": 0, "test": 1_000_000_000}  # torch seeds its generator with 32 bits
NOISE = 1.0


class SyntheticImages(Dataset):
    def __init__(self, split: str, n: int, size: int, channels: int, num_classes: int = NUM_CLASSES):
        self.n, self.size, self.channels, self.num_classes = n, size, channels, num_classes
        self.base = SPLIT_SEED[split]
        # The class patterns are shared by both splits, so test images are classifiable.
        self.patterns = torch.stack([
            torch.randn(channels, size, size, generator=torch.Generator().manual_seed(2_000_000_000 + c))
            for c in range(num_classes)])
        self.targets = [i % num_classes for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if not 0 <= index < self.n:
            raise IndexError(index)
        label = index % self.num_classes
        g = torch.Generator().manual_seed(self.base + index)
        noise = torch.randn(self.channels, self.size, self.size, generator=g)
        return self.patterns[label] + NOISE * noise, label


def load(split: str, options: DataOptions) -> SyntheticImages:
    check_split(ID, split, SPLITS)
    return SyntheticImages(split, SIZES[split], target_size(options, NATIVE), options.in_chans or CHANNELS)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="Synthetic", num_classes=NUM_CLASSES, image_size=NATIVE, in_chans=CHANNELS, splits=SPLITS,
        load=load, aliases=("random",),
        description="seeded random images (class pattern + noise), 10 classes, 224 px: compute-only runs",
        num_examples=SIZES,
    ))
