"""ImageNet-R(endition) (Hendrycks et al. 2021, "The Many Faces of Robustness"): 30,000 renditions
(art, cartoons, sketches, toys, ...) of 200 ImageNet classes.

Published layout (imagenet-r.tar unpacks to it): `imagenet-r/<wnid>/*.jpg`, 200 wnid folders. Labels
are the wnids' order (sorted, as the paper's ImageFolder), and `class_ids` names them, so a
1000-class ImageNet head is restricted to these 200 logits (benchbench.classmap), as the paper
evaluates. Download: https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar; no automatic download.
"""

from __future__ import annotations

from pathlib import Path

from benchbench import hookimpl
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.evalsets import (NATIVE, SPLITS, check_test_split, class_folders, find_root,
                                                  subset_wnids)
from benchbench_plugins.datasets.folders import FolderImages
from benchbench_plugins.datasets.transforms import photo_transform

ID = "imagenet-r"
WNIDS = subset_wnids("imagenet_r")
IMAGES = 30_000
LAYOUT = "DIR/imagenet-r/<wnid>/*.jpg (200 wnid folders)"
WHERE = "https://github.com/hendrycks/imagenet-r (imagenet-r.tar)"


def locate(options: DataOptions) -> Path:
    return find_root(ID, options, ("imagenet-r",), lambda d: any((d / w).is_dir() for w in WNIDS),
                     "ImageNet-R wnid folders", LAYOUT, WHERE)


def available(split: str, options: DataOptions) -> None:
    """Raises load's error when the split or the folder is not there (DatasetSpec.available)."""
    check_test_split(ID, split)
    locate(options)


def load(split: str, options: DataOptions) -> FolderImages:
    check_test_split(ID, split)
    return class_folders(ID, locate(options), WNIDS, photo_transform(options, NATIVE), layout=LAYOUT)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet-R", num_classes=len(WNIDS), image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_r", "imagenet-rendition"),
        description="ImageNet-R: 30k renditions of 200 ImageNet classes (test split only; logits restricted to them)",
        num_examples={"test": IMAGES}, class_ids=WNIDS,
    ))
