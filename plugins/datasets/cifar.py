"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009): 50k train / 10k test RGB 32x32 images.

Read by torchvision's CIFAR10/CIFAR100 classes from the "python version" batches
(`cifar-10-batches-py/`, `cifar-100-python/`), then held in memory as uint8; scaling to [-1, 1] (the
ViT paper's), resizing to the cell's resolution and flips (augment) happen per batch.
CIFAR-100 uses its 100 fine labels.
"""

from __future__ import annotations

from pathlib import Path

import torch

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.locate import candidate_dirs, check_split, download_dir, missing_data
from benchbench_plugins.datasets.transforms import VIT_MEAN, VIT_STD, TensorImages, tensor_images

SPLITS = ("train", "test")
SIZES = {"train": 50_000, "test": 10_000}
FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
FILES = {"cifar10": "data_batch_1..5, test_batch, batches.meta", "cifar100": "train, test, meta"}


def _tv_class(dataset_id: str):
    from torchvision.datasets import CIFAR10, CIFAR100

    return CIFAR10 if dataset_id == "cifar10" else CIFAR100


def locate(dataset_id: str, options: DataOptions) -> Path:
    """The directory holding `cifar-10-batches-py/` (or `cifar-100-python/`)."""
    looked = candidate_dirs(options, dataset_id)
    for d in looked:
        if (d / FOLDERS[dataset_id]).is_dir():
            return d
    if options.download:
        return download_dir(options)
    raise missing_data(dataset_id, f"{FOLDERS[dataset_id]}/ folder", looked,
                       f"DIR/{FOLDERS[dataset_id]}/ with {FILES[dataset_id]}, as extracted from the "
                       "official python-version archive", download="torchvision's downloader")


def load(dataset_id: str, split: str, options: DataOptions) -> TensorImages:
    check_split(dataset_id, split, SPLITS)
    root = locate(dataset_id, options)
    try:
        ds = _tv_class(dataset_id)(str(root), train=split == "train", download=options.download)
    except RuntimeError as exc:  # torchvision: "Dataset not found or corrupted" (checksums differ)
        raise BenchError(f"{dataset_id}: {root / FOLDERS[dataset_id]} is incomplete or corrupted ({exc}); "
                         "delete it and run with --download, or extract the official archive again") from exc
    except Exception as exc:  # noqa: BLE001 - network errors of the downloader
        raise BenchError(f"{dataset_id}: download into {root} failed ({type(exc).__name__}: {exc})") from exc
    images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()  # (N, 32, 32, 3) uint8 -> NCHW
    labels = torch.as_tensor(ds.targets, dtype=torch.long)
    return tensor_images(images, labels, options, native_size=32, mean=VIT_MEAN, std=VIT_STD)


def available(dataset_id: str, options: DataOptions) -> None:
    """Raises locate's error when the batches are not installed and --download is not given."""
    locate(dataset_id, options)


def _spec(dataset_id: str, name: str, classes: int, aliases: tuple[str, ...]) -> DatasetSpec:
    return DatasetSpec(
        id=dataset_id, name=name, num_classes=classes, image_size=32, in_chans=3, splits=SPLITS,
        load=lambda split, options: load(dataset_id, split, options), aliases=aliases,
        available=lambda split, options: available(dataset_id, options),
        description=f"{name}: 50k train / 10k test 32x32 RGB, {classes} classes (torchvision, python batches)",
        num_examples=SIZES,
    )


@hookimpl
def register_datasets(register) -> None:
    register(_spec("cifar10", "CIFAR-10", 10, ("cifar-10",)))
    register(_spec("cifar100", "CIFAR-100", 100, ("cifar-100",)))
