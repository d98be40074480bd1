"""ImageNet ILSVRC-2012 (Russakovsky et al. 2015): 1000 classes, train (1,281,167) / val (50,000).

The standard class-folder layout: `train/<wnid>/*.JPEG` and `val/<wnid>/*.JPEG` (the validation
images sorted into class folders, e.g. by the widely used `valprep.sh`), under DIR/imagenet,
DIR/ILSVRC2012 or DIR itself. The paper reports on the validation set: split "test" is val/.
There is no automatic download (the data needs an account at image-net.org).
"""

from __future__ import annotations

from pathlib import Path

from benchbench import hookimpl
from benchbench.weights.classmap import IMAGENET_1K
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.folders import FolderImages, folder_classes, image_folder
from benchbench_plugins.datasets.locate import candidate_dirs, check_split, missing_data
from benchbench_plugins.datasets.transforms import photo_transform

ID = "imagenet"
SPLITS = ("train", "test")
FOLDERS = {"train": "train", "test": "val"}
SIZES = {"train": 1_281_167, "test": 50_000}
NUM_CLASSES = 1000
NATIVE = 224
LAYOUT = "DIR/imagenet/train/<wnid>/*.JPEG and DIR/imagenet/val/<wnid>/*.JPEG"


def locate(options: DataOptions, split: str = "train") -> Path:
    """The folder holding the split's folder (train/, or val/ for the test split: evaluating needs no
    training images)."""
    looked = candidate_dirs(options, "imagenet", "ILSVRC2012", "imagenet-1k")
    for d in looked:
        if (d / FOLDERS[split]).is_dir():
            return d
    raise missing_data(ID, f"{FOLDERS[split]}/ class folders", looked, LAYOUT, download=None)


def load(split: str, options: DataOptions) -> FolderImages:
    check_split(ID, split, SPLITS)
    root = locate(options, split)
    directory = root / FOLDERS[split]
    classes = folder_classes(directory)
    if split == "test" and not classes:
        raise BenchError(f"{ID}: {directory} has no class folders; sort the validation images into "
                         "val/<wnid>/ (for example with valprep.sh) first")
    if tuple(classes) != IMAGENET_1K:
        unknown = sorted(set(classes) - set(IMAGENET_1K))[:3]
        raise BenchError(f"{ID}: {directory} has {len(classes)} class folders, expected ILSVRC-2012's {NUM_CLASSES} "
                         f"wnids ({LAYOUT})" + (f"; not ImageNet wnids: {', '.join(unknown)}" if unknown else ""))
    return image_folder(directory, classes, photo_transform(options, NATIVE), dataset_id=ID)


def available(split: str, options: DataOptions) -> None:
    """Raises locate's error when the split's folder is not where the loader looks."""
    locate(options, split)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet", num_classes=NUM_CLASSES, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available, class_ids=IMAGENET_1K,
        aliases=("ilsvrc2012", "imagenet-1k", "imagenet2012"),
        description="ILSVRC-2012 in class folders: train (1.28M) / test = val (50k)",
        num_examples=SIZES,
    ))
