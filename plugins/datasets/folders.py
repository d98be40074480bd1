"""Class-folder image datasets (ImageNet's train/ and val/, any user folder), labelled by folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from torch.utils.data import Dataset

from benchbench.errors import BenchError
from benchbench_plugins.datasets.transforms import open_image


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
