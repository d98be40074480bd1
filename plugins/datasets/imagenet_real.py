"""ImageNet-ReaL (Beyer et al. 2020, "Are we done with ImageNet?"): ImageNet's 50,000 validation
images with reassessed, multi-label "Real Labels"; the ViT paper's Table 2 reports its accuracy.

Files: the validation images in class folders, as the `imagenet` dataset reads them
(`DIR/imagenet/val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG`), and `real.json` from
https://github.com/google-research/reassessed-imagenet (in DIR/imagenet/, DIR/reassessed-imagenet/ or
DIR). `real.json` is a list of 50,000 lists of ImageNet-1k label indices, entry i for the image
ILSVRC2012_val_<i + 1>; 46,837 of them are non-empty. No automatic download.

Items are (image, original ImageNet label), in the folder order; `label_sets[i]` is item i's ReaL
labels (a tuple, empty when the raters kept none). ReaL accuracy is
benchbench.meters.multilabel.real_accuracy(top-1 predictions, dataset.label_sets): over the images with a
non-empty set, the fraction whose top-1 is in it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from torch.utils.data import Dataset

from benchbench import hookimpl
from benchbench.weights.classmap import IMAGENET_1K
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, check_test_split, class_folders, find_root
from benchbench_plugins.datasets.folders import FolderImages
from benchbench_plugins.datasets.transforms import photo_transform

ID = "imagenet-real"
IMAGES = 50_000
LABELLED = 46_837  # images with a non-empty ReaL label set
VAL_LAYOUT = "DIR/imagenet/val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG (sorted into class folders, e.g. by valprep.sh)"
JSON_LAYOUT = "DIR/imagenet/real.json, DIR/reassessed-imagenet/real.json or DIR/real.json"
WHERE_VAL = "https://image-net.org (ILSVRC2012_img_val.tar, needs an account)"
WHERE_JSON = "https://github.com/google-research/reassessed-imagenet (real.json)"
VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG", re.IGNORECASE)


class RealImages(Dataset):
    """ImageNet's validation images (`images`, whose items and `samples`/`targets` these are) with
    `label_sets`: item i's ReaL labels (see the module docstring)."""

    def __init__(self, images: FolderImages, label_sets: list[tuple[int, ...]]):
        if len(label_sets) != len(images):
            raise ValueError("one label set per image")
        self.images, self.label_sets = images, label_sets
        self.samples, self.targets, self.classes = images.samples, images.targets, images.classes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return self.images[index]


def read_real_json(path: Path) -> list[tuple[int, ...]]:
    """real.json's 50,000 label sets, checked: a list of lists of labels in 0..999."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{ID}: cannot read {path} as JSON ({exc}); get real.json from {WHERE_JSON}") from None
    if not isinstance(data, list) or len(data) != IMAGES:
        raise BenchError(f"{ID}: {path} should be a list of {IMAGES:,} label lists (one per validation image), "
                         f"got {type(data).__name__}" + (f" of {len(data):,}" if isinstance(data, list) else "")
                         + f"; get real.json from {WHERE_JSON}")
    sets = []
    for i, labels in enumerate(data):
        if not isinstance(labels, list) or not all(isinstance(x, int) and 0 <= x < 1000 for x in labels):
            raise BenchError(f"{ID}: {path} entry {i} (ILSVRC2012_val_{i + 1:08d}) is {labels!r}, not a list of "
                             "ImageNet labels 0..999")
        sets.append(tuple(labels))
    return sets


def image_number(path: str) -> int:
    """The 1-based number in a validation file name ILSVRC2012_val_<8 digits>.JPEG."""
    match = VAL_NAME.fullmatch(Path(path).name)
    if match is None:
        raise BenchError(f"{ID}: {path} is not named like an ImageNet validation image "
                         "(ILSVRC2012_val_<8 digits>.JPEG), so it has no ReaL labels")
    return int(match.group(1))


def locate(options: DataOptions) -> tuple[Path, Path]:
    """(the folder holding val/, the path of real.json)."""
    root = find_root(ID, options, ("imagenet", "ILSVRC2012", "imagenet-1k"), lambda d: (d / "val").is_dir(),
                     "ImageNet validation images (val/<wnid>/)", VAL_LAYOUT, WHERE_VAL)
    real = find_root(ID, options, ("imagenet", "reassessed-imagenet", "ILSVRC2012", "imagenet-1k"),
                     lambda d: (d / "real.json").is_file(), "real.json", JSON_LAYOUT, WHERE_JSON) / "real.json"
    return root, real


def available(split: str, options: DataOptions) -> None:
    """Raises load's error when the split or the files are not there (DatasetSpec.available)."""
    check_test_split(ID, split)
    locate(options)


def load(split: str, options: DataOptions) -> RealImages:
    check_test_split(ID, split)
    root, real = locate(options)
    sets = read_real_json(real)
    images = class_folders(ID, root / "val", IMAGENET_1K, photo_transform(options, NATIVE), layout=VAL_LAYOUT)
    numbers = [image_number(path) for path, _ in images.samples]
    beyond = [n for n in numbers if not 1 <= n <= IMAGES]
    if beyond:
        raise BenchError(f"{ID}: validation image number {beyond[0]} is outside 1..{IMAGES:,}, which real.json covers")
    return RealImages(images, [sets[n - 1] for n in numbers])


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="ImageNet ReaL", num_classes=1000, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("imagenet_real", "imagenet-reassessed"),
        description="ImageNet val (50k) with the reassessed multi-label ReaL labels (46,837 labelled; test split only)",
        num_examples={"test": IMAGES}, class_ids=IMAGENET_1K,
    ))
