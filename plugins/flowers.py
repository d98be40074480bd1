"""Oxford Flowers-102 (Nilsback & Zisserman 2008): 102 classes; the paper's split, train+val / test.

torchvision's layout (`flowers-102/jpg/image_00001.jpg ...`, `imagelabels.mat`, `setid.mat`) and its
downloader. torchvision's Flowers102 class reads the two MATLAB files with scipy, which benchbench
does not depend on, so they are read here by `read_mat` (MAT v5 numeric arrays, zlib-compressed or
not). train = the official `trnid` + `valid` (2,040 images), test = `tstid` (6,149).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
from torch.utils.data import Dataset

from benchbench import hookimpl
from benchbench.data import (candidate_dirs, check_split, download_dir, missing_data, open_image,
                             photo_transform)
from benchbench.errors import BenchError
from benchbench.specs import DataOptions, DatasetSpec

ID = "flowers102"
FOLDER = "flowers-102"
SPLITS = ("train", "test")
SET_KEYS = {"train": ("trnid", "valid"), "test": ("tstid",)}
SIZES = {"train": 2_040, "test": 6_149}
NATIVE = 224

# MAT v5 data types (numeric) and array classes (numeric), from MathWorks' "MAT-File Format".
MI_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
MX_CLASSES = {6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8", 15: "u8"}
MI_MATRIX, MI_COMPRESSED = 14, 15


def read_mat(path: Path) -> dict[str, np.ndarray]:
    """The real numeric arrays of a MATLAB v5 .mat file, by name (column-major, as MATLAB stores
    them); cells, structs and strings are skipped."""
    data = Path(path).read_bytes()
    if len(data) < 128 or data[126:128] not in (b"IM", b"MI"):
        raise BenchError(f"{path}: not a MATLAB v5 .mat file (v7.3 files are HDF5 and not supported)")
    order = "<" if data[126:128] == b"IM" else ">"
    out: dict[str, np.ndarray] = {}
    _elements(data, 128, order, out, path)
    return out


def _tag(buf: bytes, pos: int, order: str) -> tuple[int, int, int, int]:
    """(type, size, data start, next element) of the element at `pos`."""
    first, second = struct.unpack_from(order + "II", buf, pos)
    if first >> 16:  # small data element: type and size share the first word, data the second
        return first & 0xFFFF, first >> 16, pos + 4, pos + 8
    end = pos + 8 + second
    return first, second, pos + 8, end if first == MI_COMPRESSED else end + (-second % 8)


def _elements(buf: bytes, pos: int, order: str, out: dict, path: Path) -> None:
    while pos + 8 <= len(buf):
        kind, size, start, nxt = _tag(buf, pos, order)
        if kind == MI_COMPRESSED:
            _elements(zlib.decompress(buf[start:start + size]), 0, order, out, path)
        elif kind == MI_MATRIX:
            name, array = _matrix(buf[start:start + size], order, path)
            if array is not None:
                out[name] = array
        pos = nxt


def _matrix(buf: bytes, order: str, path: Path) -> tuple[str, np.ndarray | None]:
    parts, pos = [], 0
    while pos + 8 <= len(buf) and len(parts) < 4:  # flags, dimensions, name, real part
        kind, size, start, pos = _tag(buf, pos, order)
        parts.append((kind, buf[start:start + size]))
    if len(parts) < 3:
        raise BenchError(f"{path}: a truncated matrix element")
    flags = struct.unpack_from(order + "I", parts[0][1])[0]
    cls, is_complex = flags & 0xFF, bool(flags & 0x800)
    dims = np.frombuffer(parts[1][1], dtype=order + "i4").tolist()
    name = parts[2][1].decode("ascii", "replace")
    if cls not in MX_CLASSES or is_complex or len(parts) < 4 or parts[3][0] not in MI_TYPES:
        return name, None
    values = np.frombuffer(parts[3][1], dtype=order + MI_TYPES[parts[3][0]])  # stored in the smallest type
    return name, values.astype(MX_CLASSES[cls]).reshape(dims, order="F")


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


def locate(options: DataOptions) -> Path:
    """The `flowers-102/` folder."""
    looked = candidate_dirs(options, "flowers102")
    for d in looked:
        base = d / FOLDER
        if (base / "jpg").is_dir() and (base / "imagelabels.mat").is_file() and (base / "setid.mat").is_file():
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
        aliases=("flowers", "oxford-flowers102", "flowers-102"),
        description="Oxford Flowers-102: train = train + val (2,040), test (6,149)",
        num_examples=SIZES,
    ))
