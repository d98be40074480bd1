"""Oxford-IIIT Pet (Parkhi et al. 2012): 37 cat and dog breeds; the paper's split, trainval / test.

Read by torchvision's OxfordIIITPet from `oxford-iiit-pet/images/*.jpg` and
`oxford-iiit-pet/annotations/{trainval,test}.txt` (lines "<image> <class 1..37> <species> <breed>").
Photos of varying size: resized to the cell's resolution (default 224) and scaled to [-1, 1].
"""

from __future__ import annotations

from pathlib import Path

from torch.utils.data import Dataset

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.locate import candidate_dirs, check_split, download_dir, missing_data
from benchbench_plugins.datasets.transforms import photo_transform

ID = "oxford-iiit-pets"
SPLITS = ("train", "test")
TV_SPLIT = {"train": "trainval", "test": "test"}
SIZES = {"train": 3_680, "test": 3_669}
NATIVE = 224  # photos of varying size; the usual crop


def locate(options: DataOptions) -> Path:
    """The directory holding `oxford-iiit-pet/`."""
    looked = candidate_dirs(options, "oxford-iiit-pets", "pets")
    for d in looked:
        if (d / "oxford-iiit-pet" / "images").is_dir() and (d / "oxford-iiit-pet" / "annotations").is_dir():
            return d
    if options.download:
        return download_dir(options)
    raise missing_data(ID, "oxford-iiit-pet/ folder (images/, annotations/)", looked,
                       "DIR/oxford-iiit-pet/images/*.jpg and DIR/oxford-iiit-pet/annotations/{trainval,test}.txt, "
                       "as extracted from images.tar.gz and annotations.tar.gz", download="torchvision's downloader")


def load(split: str, options: DataOptions) -> Dataset:
    check_split(ID, split, SPLITS)
    from torchvision.datasets import OxfordIIITPet

    root = locate(options)
    try:
        return OxfordIIITPet(str(root), split=TV_SPLIT[split], target_types="category",
                             transform=photo_transform(options, NATIVE), download=options.download)
    except (RuntimeError, OSError, ValueError) as exc:
        raise BenchError(f"{ID}: cannot read {root / 'oxford-iiit-pet'} ({type(exc).__name__}: {exc})") from exc


def available(split: str, options: DataOptions) -> None:
    """Raises locate's error when the files are not where the loader looks."""
    locate(options)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="Oxford-IIIT Pets", num_classes=37, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("pets", "oxford-iiit-pet", "oxford_iiit_pet"),
        description="Oxford-IIIT Pet, 37 breeds: train = trainval (3,680), test (3,669) (torchvision)",
        num_examples=SIZES,
    ))
