"""Oxford Flowers-102 (Nilsback & Zisserman 2008): 102 classes; the paper's split, train+val / test.

torchvision's layout (`flowers-102/jpg/image_00001.jpg ...`, `imagelabels.mat`, `setid.mat`) and its
downloader. torchvision's Flowers102 class reads the two MATLAB files with scipy, which benchbench
does not depend on, so they are read by `mat.read_mat` (MAT v5 numeric arrays, zlib-compressed or
not). train = the official `trnid` + `valid` (2,040 images), test = `tstid` (6,149).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
from torch.utils.data import Dataset

from benchbench import hookimpl
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec
from benchbench_plugins.datasets.locate import candidate_dirs, check_split, download_dir, missing_data
from benchbench_plugins.datasets.mat import read_mat
from benchbench_plugins.datasets.transforms import open_image, photo_transform

ID = "flowers102"
FOLDER = "flowers-102"
SPLITS = ("train", "test")
SET_KEYS = {"train": ("trnid", "valid"), "test": ("tstid",)}
SIZES = {"train": 2_040, "test": 6_149}
NATIVE = 224

class FlowersFiles(Dataset):
    """Images of one split and their labels (0..101), as PIL images through `transform`."""

    def __init__(self, base: Path, split: str, transform: Callable):
        labels = read_mat(base / "imagelabels.mat")["labels"].ravel().astype(np.int64)
        sets = read_mat(base / "setid.mat")
        ids = np.concatenate([sets[key].ravel() for key in SET_KEYS[split]]).astype(np.int64)
        if ids.size and (ids.min() < 1 or ids.max() > labels.size):
            raise BenchError(f"{base / 'setid.mat'}: image ids {ids.min()}..{ids.max()} outside the "
                             f"{labels.size} labels of {base / 'imagelabels.mat'}")
        self.files = [str(base / "jpg" / f"image_{i:05d}.jpg") for i in ids]
        self.targets = (labels[ids - 1] - 1).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        return self.transform(open_image(self.files[index])), self.targets[index]


def _download(root: Path) -> None:
    from torchvision.datasets import Flowers102
    from torchvision.datasets.utils import download_and_extract_archive, download_url

    base, files, url = root / FOLDER, Flowers102._file_dict, Flowers102._download_url_prefix
    try:
        if not (base / "jpg").is_dir():
            download_and_extract_archive(url + files["image"][0], str(base), md5=files["image"][1])
        for key in ("label", "setid"):
            download_url(url + files[key][0], str(base), md5=files[key][1])
    except Exception as exc:  # noqa: BLE001 - any network/IO failure
        raise BenchError(f"{ID}: download into {base} failed ({type(exc).__name__}: {exc})") from exc


def _installed(options: DataOptions) -> tuple[Path | None, list[Path]]:
    """The `flowers-102/` folder that holds the files (None if none), and the folders looked in."""
    looked = candidate_dirs(options, "flowers102")
    for d in looked:
        base = d / FOLDER
        if (base / "jpg").is_dir() and (base / "imagelabels.mat").is_file() and (base / "setid.mat").is_file():
            return base, looked
    return None, looked


def available(split: str, options: DataOptions) -> None:
    """Raises locate's error when the files are not installed and --download is not given."""
    if not options.download:
        locate(options)


def locate(options: DataOptions) -> Path:
    """The `flowers-102/` folder (downloaded first with --download when it is not installed)."""
    base, looked = _installed(options)
    if base is not None:
        return base
    if options.download:
        _download(download_dir(options))
        return download_dir(options) / FOLDER
    raise missing_data(ID, f"{FOLDER}/ folder (jpg/, imagelabels.mat, setid.mat)", looked,
                       f"DIR/{FOLDER}/jpg/image_00001.jpg ... from 102flowers.tgz, and DIR/{FOLDER}/imagelabels.mat "
                       f"and setid.mat", download="torchvision's downloader")


def load(split: str, options: DataOptions) -> Dataset:
    check_split(ID, split, SPLITS)
    return FlowersFiles(locate(options), split, photo_transform(options, NATIVE))


@hookimpl
def register_datasets(register) -> None:
    register(DatasetSpec(
        id=ID, name="Oxford Flowers-102", num_classes=102, image_size=NATIVE, in_chans=3, splits=SPLITS, load=load,
        available=available,
        aliases=("flowers", "oxford-flowers102", "flowers-102"),
        description="Oxford Flowers-102: train = train + val (2,040), test (6,149)",
        num_examples=SIZES,
    ))
