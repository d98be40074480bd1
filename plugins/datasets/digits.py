"""UCI handwritten digits as scikit-learn bundles them (`sklearn.datasets.load_digits`): 1,797 grey
8x8 images (pixel values 0..16), 10 classes; no download, so it runs on any machine.

The split is ours, fixed and documented: 50 images of each class (500) go to `test`, the other
1,297 to `train`, drawn per class by `numpy.random.default_rng(0).permutation` over that class's
indices in sklearn's order (classes 0..9 in turn, one generator). Pixels are scaled to [0, 1]
(value / 16) and normalised with the training split's mean/std, as Fashion-MNIST is; resizing to the
cell's resolution and grey -> 3-channel replication happen per batch (transforms.BatchTransform).
"""

from __future__ import annotations

import numpy as np
import torch

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.transforms import PixelImages, TensorImages, tensor_images

SPLITS = ("train", "test")
SEED = 0
TEST_PER_CLASS = 50
SPLIT_SIZES = {"train": 1_297, "test": 500}
MAX_VALUE = 16.0  # the digits' pixel values are counts of on-pixels in 4x4 blocks: 0..16
# Statistics of the 1,297 training images, scaled to [0, 1] (tests recompute them).
MEAN, STD = 0.30564, 0.37627


def raw() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's images (1797, 8, 8) float64 in 0..16 and labels (1797,) int."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise BenchError("digits: needs scikit-learn (pip install scikit-learn; scripts/setup.sh installs it)") from exc
    d = load_digits()
    return d.images, d.target


def test_indices(labels: np.ndarray) -> np.ndarray:
    """Indices of the test split: TEST_PER_CLASS per class, seeded, sorted."""
    rng = np.random.default_rng(SEED)
    picked = [rng.permutation(np.flatnonzero(labels == k))[:TEST_PER_CLASS] for k in range(10)]
    return np.sort(np.concatenate(picked))


def split_indices(split: str, labels: np.ndarray) -> np.ndarray:
    test = test_indices(labels)
    if split == "test":
        return test
    keep = np.ones(len(labels), dtype=bool)
    keep[test] = False
    return np.flatnonzero(keep)


def load(split: str, options: DataOptions) -> TensorImages | PixelImages:
    if split not in SPLITS:
        raise BenchError(f"digits: unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    images, labels = raw()
    idx = split_indices(split, labels)
    x = torch.from_numpy(images[idx]).float().unsqueeze(1).div_(MAX_VALUE).sub_(MEAN).div_(STD)
    # as 8-bit grey images (0..16 -> 0..255), for a cell's evaluation transform
    pixels = torch.from_numpy(np.rint(images[idx] * (255 / MAX_VALUE)).astype(np.uint8)).unsqueeze(1)
    return tensor_images(x, torch.from_numpy(labels[idx]).long(), options, native_size=8, pixels=pixels)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id="digits",
        name="Digits (UCI)",
        num_classes=10,
        image_size=8,
        in_chans=1,
        splits=SPLITS,
        load=load,
        aliases=("uci-digits", "sklearn-digits"),
        description="UCI handwritten digits bundled with scikit-learn, 8x8 grey; seeded 1,297/500 split "
                    "(50 test images per class)",
        num_examples=SPLIT_SIZES,
    ))
