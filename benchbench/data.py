"""What every dataset plugin shares: transforms, per-class subsets, where files are looked for.

Two kinds of datasets come out of the plugins:
- `TensorImages`: the whole split in memory (Fashion-MNIST, CIFAR). Batches are slices of one tensor;
  resizing, channel replication and augmentation run once per batch on the batch (`BatchTransform`),
  so the 28 px fast path costs nothing and 224 px never materialises the resized split.
- file-backed datasets (torchvision's classes, folders): one image per item through `photo_transform`,
  batched by a DataLoader with worker processes.

Normalisation: Fashion-MNIST keeps its published mean/std; every other dataset is scaled to [-1, 1]
as the ViT paper's code does (`image / 127.5 - 1`, i.e. mean = std = 0.5 per channel).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset

from benchbench.errors import BenchError
from benchbench.specs import DataOptions

VIT_MEAN = VIT_STD = (0.5, 0.5, 0.5)  # [0, 1] -> [-1, 1], the ViT paper's input scaling
CACHE_DIR = Path.home() / ".cache" / "benchbench"
HOW_TO_ROOT = "pass --data-root DIR (or set BENCHBENCH_DATA=DIR)"


# ---------------------------------------------------------------------------------------------
# Channels and size


def match_channels(x: torch.Tensor, in_chans: int | None) -> torch.Tensor:
    """(..., C, H, W) with C = in_chans: grey (C = 1) is replicated; anything else must already fit."""
    c = x.shape[-3]
    if in_chans is None or c == in_chans:
        return x
    if c == 1:
        return x.expand(*x.shape[:-3], in_chans, *x.shape[-2:]).clone()
    raise BenchError(f"cannot feed {c}-channel images to a model that takes {in_chans} channels "
                     "(only grey images are replicated)")


def target_size(options: DataOptions, native: int) -> int:
    return int(options.image_size or native)


class BatchTransform:
    """What in-memory images need per batch (N, C, H, W): uint8 -> [0, 1], normalise, resize to
    `size` (bilinear, antialiased when shrinking), random horizontal flip (`flip`), grey -> in_chans.
    """

    def __init__(self, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 size: int | None = None, in_chans: int | None = None, flip: bool = False):
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.size, self.in_chans, self.flip = size, in_chans, flip

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        if self.size is not None and tuple(x.shape[-2:]) != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False,
                              antialias=self.size < max(x.shape[-2:]))
        if self.flip:
            flipped = torch.rand(len(x)) < 0.5
            x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
        return match_channels(x, self.in_chans)

    @property
    def is_identity(self) -> bool:
        return self.mean is None and self.size is None and self.in_chans is None and not self.flip


class TensorImages(TensorDataset):
    """A split held in memory: images (N, C, H, W) and labels (N,), plus a per-batch transform.

    `tensors` are the stored images (as read, possibly uint8); `transform` turns a batch of them into
    what the model takes. Training code slices `tensors` and calls `transform` once per batch.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: BatchTransform | None = None):
        super().__init__(images, labels)
        self.transform = None if transform is None or transform.is_identity else transform

    def __getitem__(self, index):
        x, y = self.tensors[0][index], self.tensors[1][index]
        if self.transform is not None:
            x = self.transform(x[None])[0]
        return x, y

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of stored images as the model takes them."""
        return x if self.transform is None else self.transform(x)


def tensor_images(images: torch.Tensor, labels: torch.Tensor, options: DataOptions, *, native_size: int,
                  mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> TensorImages:
    """In-memory images honouring `options`: resized to image_size, channels to in_chans, augmented."""
    size = target_size(options, native_size)
    transform = BatchTransform(mean=mean, std=std, size=None if size == native_size else size,
                               in_chans=None if options.in_chans in (None, images.shape[1]) else options.in_chans,
                               flip=options.augment)
    return TensorImages(images, labels, transform)


class SquareResize:
    """PIL image -> (size, size), bilinear with PIL's antialiasing; untouched when already that size."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img):
        from PIL import Image

        if img.size == (self.size, self.size):
            return img
        return img.resize((self.size, self.size), Image.Resampling.BILINEAR)


class NormalisedTensor:
    """PIL image -> float tensor (C, H, W), (pixel / 255 - mean) / std as one multiply-add per pixel in
    numpy, grey replicated up to `in_chans`. (torchvision's v2 PILToTensor + ToDtype + Normalize chain
    costs about 250 us per small image, this about 40 us: on two CPU cores, the difference between a
    loader that keeps up with a small model and one that does not.)"""

    def __init__(self, mean: Sequence[float], std: Sequence[float], in_chans: int | None):
        import numpy as np

        self.scale = (1.0 / (255.0 * np.asarray(std, dtype=np.float32))).astype(np.float32)
        self.offset = (np.asarray(mean, dtype=np.float32) / np.asarray(std, dtype=np.float32)).astype(np.float32)
        self.in_chans = in_chans

    def __call__(self, img) -> torch.Tensor:
        import numpy as np

        a = np.asarray(img, dtype=np.float32)
        if a.ndim == 2:  # grey: (H, W)
            x = torch.from_numpy((a * self.scale[0] - self.offset[0])[None])
        else:  # (H, W, C) -> (C, H, W)
            c = a.shape[2]
            x = torch.from_numpy(np.ascontiguousarray((a * self.scale[:c] - self.offset[:c]).transpose(2, 0, 1)))
        return match_channels(x, self.in_chans)


def photo_transform(options: DataOptions, native_size: int, *, mean: Sequence[float] = VIT_MEAN,
                    std: Sequence[float] = VIT_STD):
    """PIL image -> normalised float tensor (C, size, size).

    Evaluation (and features): resize to a square of `size` without cropping, as the paper's code
    evaluates. Training with `augment`: an Inception-style random crop resized to `size`, and a random
    horizontal flip (torchvision's RandomResizedCrop, RandomHorizontalFlip).
    """
    from torchvision.transforms import v2

    size = target_size(options, native_size)
    steps = ([v2.RandomResizedCrop((size, size), antialias=True), v2.RandomHorizontalFlip()] if options.augment
             else [SquareResize(size)])
    return v2.Compose([*steps, NormalisedTensor(mean, std, options.in_chans)])


def open_image(path: str, mode: str = "RGB"):
    """An image file as a PIL image in `mode` ("RGB" or "L"); picklable for DataLoader workers."""
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert(mode)


# ---------------------------------------------------------------------------------------------
# Labels and subsets


def labels_of(dataset: Dataset) -> torch.Tensor:
    """All labels of a dataset as a long tensor, without decoding images where the dataset keeps them."""
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[1].long()
    if isinstance(dataset, Subset):
        return labels_of(dataset.dataset)[torch.as_tensor(dataset.indices, dtype=torch.long)]
    for attr in ("targets", "_labels", "labels"):  # torchvision's classes keep them under these names
        values = getattr(dataset, attr, None)
        if values is not None and not callable(values) and len(values) == len(dataset):
            return torch.as_tensor(values, dtype=torch.long)
    return torch.tensor([int(dataset[i][1]) for i in range(len(dataset))], dtype=torch.long)


def take(dataset: Dataset, indices) -> Dataset:
    """The examples at `indices`, staying on the in-memory fast path where there is one."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    if isinstance(dataset, TensorImages):
        return TensorImages(dataset.tensors[0][idx], dataset.tensors[1][idx], dataset.transform)
    if isinstance(dataset, TensorDataset):
        return TensorDataset(*(t[idx] for t in dataset.tensors))
    return Subset(dataset, idx.tolist())


def random_subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """A seeded random subset of n examples; n <= 0 or n >= len means all of them."""
    if n <= 0 or n >= len(dataset):
        return dataset
    return take(dataset, torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n])


def per_class_indices(labels: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Indices of the first n examples of each class after a seeded shuffle, in dataset order.

    A class with fewer than n examples contributes all of them. With the same seed, the subset for
    n is contained in the subset for any larger n (the draws are nested).
    """
    labels = torch.as_tensor(labels, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    shuffled = labels[order]
    keep = [order[shuffled == c][:n] for c in torch.unique(labels).tolist()]
    return torch.sort(torch.cat(keep)).values if keep else torch.zeros(0, dtype=torch.long)


def per_class_subset(dataset: Dataset, n: int, seed: int) -> Dataset:
    """The first n examples per class after a seeded shuffle; n <= 0 means all of them."""
    if n <= 0:
        return dataset
    return take(dataset, per_class_indices(labels_of(dataset), n, seed))


def training_subset(dataset: Dataset, *, per_class: int, total: int, seed: int) -> Dataset:
    """The training examples a protocol uses: `per_class` per class, or `total` at random, or all."""
    if per_class > 0 and total > 0:
        raise BenchError("set at most one of train_per_class and train_subset (both are > 0)")
    if per_class > 0:
        return per_class_subset(dataset, per_class, seed)
    return random_subset(dataset, total, seed)


# ---------------------------------------------------------------------------------------------
# Where files are


def candidate_dirs(options: DataOptions, *names: str) -> list[Path]:
    """Folders a dataset is looked for in: DIR/<name> for each name, then DIR, for --data-root DIR;
    then the download cache (~/.cache/benchbench/<name>, ~/.cache/benchbench)."""
    dirs: list[Path] = []
    for root in ([Path(options.root)] if options.root is not None else []) + [CACHE_DIR]:
        dirs += [root / name for name in names] + [root]
    return list(dict.fromkeys(dirs))


def download_dir(options: DataOptions) -> Path:
    """Where torchvision's downloaders write: --data-root DIR, else ~/.cache/benchbench."""
    return Path(options.root) if options.root is not None else CACHE_DIR


def missing_data(dataset_id: str, what: str, looked: Sequence[Path], layout: str, *,
                 download: str | None) -> BenchError:
    """The "how to get this data" error: what was missing, where we looked, and the ways to provide it."""
    ways = [f"  - put the files in DIR ({layout}) and {HOW_TO_ROOT}"]
    ways.append(f"  - with internet access: add --download ({download})" if download else
                "  - there is no automatic download for this dataset")
    return BenchError(f"{dataset_id}: no {what} found in: " + ", ".join(str(d) for d in looked)
                      + "\nProvide the data in one of these ways:\n" + "\n".join(ways))


def check_split(dataset_id: str, split: str, splits: Sequence[str]) -> None:
    if split not in splits:
        raise BenchError(f"{dataset_id}: unknown split {split!r}; allowed: {', '.join(splits)}")


def auto_workers(dataset: Dataset) -> int:
    """DataLoader workers when a protocol's num_workers is -1: none for in-memory tensors (a batch is a
    slice); for files, none on one or two CPU cores (measured: a worker there takes cores from the
    training step and costs more than it saves, benchmarks/loader_speed.py), else half the cores, up
    to 4."""
    if isinstance(dataset, TensorDataset):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return 0 if cpus <= 2 else min(4, cpus // 2)


# ---------------------------------------------------------------------------------------------
# Class folders (ImageNet's train/ and val/, any user folder)


def folder_classes(directory: Path) -> list[str]:
    """The class names of a class-folder split: its sub-folders, sorted (torchvision's order)."""
    return sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))


class FolderImages(Dataset):
    """Images in `directory`/<class>/<file>, labelled by the index of <class> in `classes`.

    The files are listed by torchvision's `make_dataset` (ImageFolder's own scan: its image
    extensions, sorted), each opened as a PIL image in `mode` and passed through `transform`.
    """

    def __init__(self, directory: Path, classes: Sequence[str], transform, *, mode: str = "RGB",
                 allow_empty: bool = False):
        from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

        self.classes = list(classes)
        self.samples = make_dataset(str(directory), {c: i for i, c in enumerate(self.classes)},
                                    extensions=IMG_EXTENSIONS, allow_empty=allow_empty)
        self.targets = [label for _, label in self.samples]
        self.transform, self.mode = transform, mode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        return self.transform(open_image(path, self.mode)), label


def image_folder(directory: Path, classes: Sequence[str], transform, *, mode: str = "RGB",
                 dataset_id: str = "imagefolder", allow_missing_classes: bool = False) -> FolderImages:
    """A class-folder split labelled with `classes` (the training split's), so a test split lacking a
    class keeps the training split's numbering; BenchErrors for foreign classes and empty folders."""
    extra = sorted(set(folder_classes(directory)) - set(classes))
    if extra:
        raise BenchError(f"{dataset_id}: {directory} has class folders the training split lacks: "
                         + ", ".join(extra[:10]) + (" ..." if len(extra) > 10 else ""))
    try:
        ds = FolderImages(directory, classes, transform, mode=mode, allow_empty=allow_missing_classes)
    except FileNotFoundError as exc:  # torchvision: a class folder without a single image file
        raise BenchError(f"{dataset_id}: {exc}") from exc
    if len(ds) == 0:
        raise BenchError(f"{dataset_id}: no image files under {directory}")
    return ds
