"""Fashion-MNIST (Xiao et al. 2017): 60k train / 10k test grey 28x28 images, 10 classes.

Held in memory as one float tensor, normalised with the training set's mean/std; resizing (to the
cell's resolution) and grey -> 3-channel replication (for 3-channel models) happen per batch. A cell
with an evaluation transform (a checkpoint's, a suite's `mean`, `std`, `crop_pct`, ...) gets the uint8
images through it instead, as PIL images (plugins/datasets/transforms.py `PixelImages`).

Files are looked for, in order: `--data-root` (or $BENCHBENCH_DATA), Debian's package
`dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist), then torchvision's downloader when
downloads are allowed (`--download`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.idx import read_idx
from benchbench_plugins.datasets.locate import empty_note, empty_root
from benchbench_plugins.datasets.transforms import PixelImages, TensorImages, tensor_images

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# Statistics of the 60k training images, scaled to [0, 1].
MEAN, STD = 0.2860, 0.3530
SPLIT_SIZES = {"train": 60_000, "test": 10_000}


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def _candidate_dirs(options: DataOptions) -> list[Path]:
    dirs = []
    if options.root is not None:
        root = Path(options.root)
        dirs += [root / "fashion-mnist", root, root / "FashionMNIST" / "raw"]
    return dirs + ([] if empty_root(options) else [DEBIAN_DIR])  # an empty --data-root: no silent fall back


def _download(options: DataOptions) -> Path:
    from torchvision.datasets import FashionMNIST

    root = Path(options.root) if options.root is not None else Path.home() / ".cache" / "benchbench"
    try:
        FashionMNIST(root=str(root), train=True, download=True)
        FashionMNIST(root=str(root), train=False, download=True)
    except Exception as exc:  # noqa: BLE001 - any network/IO failure becomes the same advice
        raise BenchError(f"fashion-mnist: download into {root} failed ({exc}).\n{_HOW_TO}") from exc
    return root / "FashionMNIST" / "raw"


_HOW_TO = (
    "Provide the data in one of these ways:\n"
    "  - Debian/Ubuntu: sudo apt-get install dataset-fashion-mnist  (files in /usr/share/datasets/fashion-mnist)\n"
    "  - put the four IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],\n"
    "    t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) in DIR or DIR/fashion-mnist and pass\n"
    "    --data-root DIR (or set BENCHBENCH_DATA=DIR)\n"
    "  - with internet access: add --download (torchvision's downloader)"
)


def locate(split: str, options: DataOptions) -> tuple[Path, Path]:
    """The (images, labels) files of a split; a BenchError saying how to get them otherwise."""
    images_stem, labels_stem = FILES[split]
    looked = _candidate_dirs(options)
    for d in looked:
        images, labels = _find(d, images_stem), _find(d, labels_stem)
        if images and labels:
            return images, labels
    if options.download:
        d = _download(options)
        images, labels = _find(d, images_stem), _find(d, labels_stem)
        if images and labels:
            return images, labels
        looked.append(d)
    raise BenchError(
        f"fashion-mnist: no {split} files ({images_stem}[.gz], {labels_stem}[.gz]) found in: "
        + ", ".join(str(d) for d in looked) + empty_note(looked) + f"\n{_HOW_TO}"
    )


def available(split: str, options: DataOptions) -> None:
    """Raises locate's error when the split's files are not installed and --download is not given."""
    if not options.download:
        locate(split, options)


def load(split: str, options: DataOptions) -> TensorImages | PixelImages:
    if split not in FILES:
        raise BenchError(f"fashion-mnist: unknown split {split!r}; allowed: {', '.join(FILES)}")
    images_path, labels_path = locate(split, options)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise BenchError(f"{images_path}: expected images of shape (N, 28, 28), got {images.shape}")
    if labels.shape != (images.shape[0],):
        raise BenchError(f"{labels_path}: {labels.shape[0] if labels.ndim else 0} labels for "
                         f"{images.shape[0]} images in {images_path}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise BenchError(f"{labels_path}: labels must lie in 0..9, found {labels.min()}..{labels.max()}")
    pixels = torch.from_numpy(images).unsqueeze(1)
    x = pixels.float().div_(255.0).sub_(MEAN).div_(STD)
    return tensor_images(x, torch.from_numpy(labels).long(), options, native_size=28, pixels=pixels)


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id="fashion-mnist",
        name="Fashion-MNIST",
        num_classes=10,
        image_size=28,
        in_chans=1,
        splits=tuple(FILES),
        load=load,
        available=available,
        aliases=("fashion_mnist", "fmnist"),
        description="Zalando Fashion-MNIST, official 60k/10k split, IDX files",
        num_examples=SPLIT_SIZES,
    ))
