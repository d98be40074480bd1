"""`imagefolder:<path>`: any folder of images in class folders, `<path>/train/<class>/<image>` and
`<path>/test/<class>/<image>` (or `val/` for the test split).

Classes are the sub-folders of train/ (sorted). The native size is the first training image's side if
it is square, else 224; grey first images make a 1-channel dataset (replicated for 3-channel models),
anything else is read as RGB. Scaled to [-1, 1] as in the ViT paper.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.folders import FolderImages, folder_classes, image_folder, unreadable_image
from benchbench_plugins.datasets.locate import check_split
from benchbench_plugins.datasets.transforms import photo_transform

ID = "imagefolder"
SPLITS = ("train", "test")
DEFAULT_SIZE = 224
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


def _test_dir(root: Path) -> Path | None:
    return next((root / name for name in ("test", "val") if (root / name).is_dir()), None)


def _first_image(train: Path, classes: list[str]) -> Path:
    from torchvision.datasets.folder import IMG_EXTENSIONS

    for c in classes:
        try:
            files = sorted((train / c).iterdir())
        except OSError as exc:
            raise BenchError(f"{ID}: cannot list {train / c}: {exc.strerror or exc}") from None
        for f in files:
            if f.is_file() and f.suffix.lower() in IMG_EXTENSIONS:
                return f
    raise BenchError(f"{ID}: no image files under {train} (extensions: {', '.join(IMG_EXTENSIONS)})")


def bind(arg: str) -> DatasetSpec:
    """The dataset in folder `arg`: classes counted, native size and channels read from one image."""
    from PIL import Image

    root = Path(arg).expanduser()
    layout = f"{root}/train/<class>/<image> and {root}/test/<class>/<image> (or val/)"
    if not root.is_dir():
        raise BenchError(f"{ID}:{arg}: no such folder {root.resolve()}; expected {layout}")
    train = root / "train"
    classes = folder_classes(train) if train.is_dir() else []
    if not classes:
        raise BenchError(f"{ID}:{arg}: no class folders in {train}; expected {layout}")
    first = _first_image(train, classes)
    try:
        with Image.open(first) as img:
            (w, h), mode = img.size, img.mode
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for corrupt files
        raise unreadable_image(f"{ID}:{arg}", first, exc) from None
    size = w if w == h else DEFAULT_SIZE
    grey = mode in GREY_MODES
    return DatasetSpec(
        id=f"{ID}:{arg}", name=root.resolve().name or str(root), num_classes=len(classes), image_size=size,
        in_chans=1 if grey else 3, splits=SPLITS,
        load=partial(load, root, tuple(classes), size, "L" if grey else "RGB", f"{ID}:{arg}"),
        description=f"image folder {root.resolve()}: {len(classes)} classes",
    )


def load(root: Path, classes: tuple[str, ...], native: int, mode: str, dataset_id: str, split: str,
         options: DataOptions) -> FolderImages:
    check_split(dataset_id, split, SPLITS)
    directory = root / "train" if split == "train" else _test_dir(root)
    if directory is None:
        raise BenchError(f"{dataset_id}: no test split: neither {root / 'test'} nor {root / 'val'} exists")
    channels = 1 if mode == "L" else 3
    transform = photo_transform(options, native, mean=(0.5,) * channels, std=(0.5,) * channels)
    return image_folder(directory, classes, transform, mode=mode, dataset_id=dataset_id,
                        allow_missing_classes=split != "train", root=root)


def _unbound(split: str, options: DataOptions):
    raise BenchError(f"{ID}: needs a folder: write {ID}:<path>")


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="Image folder", num_classes=0, image_size=DEFAULT_SIZE, in_chans=3, splits=SPLITS,
        load=_unbound, bind=bind,
        description="imagefolder:<path>: <path>/train/<class>/* and <path>/test/<class>/* (or val/)",
    ))
