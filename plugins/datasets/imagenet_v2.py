"""ImageNet-V2 (Recht et al. 2019, "Do ImageNet Classifiers Generalize to ImageNet?"): three new test
sets of 10,000 images each (10 per class), sampled like ImageNet's validation set.

Variants (ids): `imagenet-v2` (MatchedFrequency, the one papers report), `imagenet-v2-threshold0.7`
and `imagenet-v2-top-images`. Published layout, as the release's tarballs unpack:
`imagenetv2-<variant>-format-val/<class index>/*.jpeg`, where the folder names are ImageNet-1k label
indices 0..999 (not wnids), so labels are the folder's number. Download from
https://huggingface.co/datasets/vaishaal/ImageNetV2 (imagenetv2-<variant>.tar.gz); no automatic download.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from benchbench import hookimpl
from benchbench.weights.classmap import IMAGENET_1K
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.evalsets import NATIVE, SPLITS, check_test_split, class_folders, find_root
from benchbench_plugins.datasets.folders import FolderImages
from benchbench_plugins.datasets.transforms import photo_transform

VARIANTS = {"imagenet-v2": "matched-frequency", "imagenet-v2-threshold0.7": "threshold0.7",
            "imagenet-v2-top-images": "top-images"}
IMAGES = 10_000
FOLDERS = tuple(str(i) for i in range(1000))  # label i is folder "i"; numeric order, not sorted as text
WHERE = "https://huggingface.co/datasets/vaishaal/ImageNetV2"


def layout(variant: str) -> str:
    return f"DIR/imagenetv2-{variant}-format-val/<class index 0..999>/*.jpeg"


def locate(dataset_id: str, options: DataOptions) -> Path:
    variant = VARIANTS[dataset_id]
    return find_root(dataset_id, options, (f"imagenetv2-{variant}-format-val", f"imagenetv2-{variant}"),
                     lambda d: (d / "0").is_dir(), f"ImageNet-V2 {variant} class folders 0..999", layout(variant),
                     f"{WHERE} (imagenetv2-{variant}.tar.gz)")


def available(dataset_id: str, split: str, options: DataOptions) -> None:
    """Raises load's error when the split or the folder is not there (DatasetSpec.available)."""
    check_test_split(dataset_id, split)
    locate(dataset_id, options)


def load(dataset_id: str, split: str, options: DataOptions) -> FolderImages:
    check_test_split(dataset_id, split)
    return class_folders(dataset_id, locate(dataset_id, options), FOLDERS, photo_transform(options, NATIVE),
                         layout=layout(VARIANTS[dataset_id]))


def checker(dataset_id: str):
    """`available` of one variant, as DatasetSpec.available takes it (picklable)."""
    return partial(available, dataset_id)


def loader(dataset_id: str):
    """`load` of one variant, as DatasetSpec.load takes it (picklable)."""
    return partial(load, dataset_id)


@hookimpl
def register_datasets(register) -> None:
    for dataset_id, variant in VARIANTS.items():
        aliases = tuple(a for a in (f"imagenetv2-{variant}", f"imagenet-v2-{variant}") if a != dataset_id)
        if variant == "matched-frequency":
            aliases += ("imagenetv2",)
        register(DatasetSpec(
            id=dataset_id, name=f"ImageNet-V2 ({variant})", num_classes=1000, image_size=NATIVE, in_chans=3,
            splits=SPLITS, load=loader(dataset_id), available=checker(dataset_id), aliases=aliases,
            description=f"ImageNet-V2 {variant}: 10k test images, 10 per ImageNet class (test split only)",
            num_examples={"test": IMAGES}, class_ids=IMAGENET_1K,
        ))
