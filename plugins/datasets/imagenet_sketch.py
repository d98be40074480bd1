"""ImageNet-Sketch (Wang et al. 2019, "Learning Robust Global Representations by Penalizing Local
Predictive Power"): 50,889 black-and-white sketches, about 50 for each of ImageNet's 1000 classes.

Published layout (ImageNet-Sketch.zip unpacks to it): `sketch/<wnid>/*.JPEG`, 1000 wnid folders,
labelled in ImageNet-1k's order (the wnids sorted). Download: https://github.com/HaohanWang/ImageNet-Sketch
(Google Drive or Kaggle); no automatic download.
"""

from __future__ import annotations

from pathlib import Path

from benchbench import hookimpl
from benchbench.classmap import IMAGENET_1K
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, check_test_split, class_folders, find_root
from benchbench_plugins.datasets.folders import FolderImages
from benchbench_plugins.datasets.transforms import photo_transform

ID = "imagenet-sketch"
IMAGES = 50_889
LAYOUT = "DIR/sketch/<wnid>/*.JPEG (1000 wnid folders; also found as DIR/imagenet-sketch/sketch)"
WHERE = "https://github.com/HaohanWang/ImageNet-Sketch (ImageNet-Sketch.zip)"


def locate(options: DataOptions) -> Path:
    return find_root(ID, options, ("sketch", "imagenet-sketch/sketch", "imagenet-sketch", "ImageNet-Sketch"),
                     lambda d: any((d / w).is_dir() for w in IMAGENET_1K), "ImageNet-Sketch wnid folders", LAYOUT,
                     WHERE)


def available(split: str, options: DataOptions) -> None:
    """Raises load's error when the split or the folder is not there (DatasetSpec.available)."""
    check_test_split(ID, split)
    locate(options)


def load(split: str, options: DataOptions) -> FolderImages:
    check_test_split(ID, split)
    return class_folders(ID, locate(options), IMAGENET_1K, photo_transform(options, NATIVE), layout=LAYOUT)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet-Sketch", num_classes=1000, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_sketch", "sketch"),
        description="ImageNet-Sketch: 50,889 sketches of the 1000 ImageNet classes (test split only)",
        num_examples={"test": IMAGES}, class_ids=IMAGENET_1K,
    ))
