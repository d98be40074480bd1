"""Writers for tiny datasets in their real on-disk formats, for tests: CIFAR's pickled batches, the
Oxford-IIIT Pet and Flowers-102 folders with their annotation files (MATLAB v5 for Flowers), ImageNet-
style class folders."""

from __future__ import annotations

import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


# CIFAR: python-version batches, dicts pickled with "data" (N, 3072) uint8, rows = R(1024) G(1024)
# B(1024) of a 32x32 image in row-major order, and "labels" (CIFAR-10) or "fine_labels" (CIFAR-100).
def cifar_images(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, size=n).tolist()


def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def write_cifar10(root: Path, train: tuple[np.ndarray, list[int]], test: tuple[np.ndarray, list[int]]) -> Path:
    """root/cifar-10-batches-py/ with data_batch_1..5 (the training images split in five), test_batch,
    batches.meta. Images are (N, 32, 32, 3) uint8."""
    d = Path(root) / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    images, labels = train
    for i, chunk in enumerate(np.array_split(np.arange(len(images)), 5), start=1):
        _pickle(d / f"data_batch_{i}", {"data": _rows(images[chunk]), "labels": [labels[j] for j in chunk],
                                         "batch_label": f"training batch {i} of 5"})
    _pickle(d / "test_batch", {"data": _rows(test[0]), "labels": list(test[1])})
    _pickle(d / "batches.meta", {"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": 10000})
    return Path(root)


def write_cifar100(root: Path, train: tuple[np.ndarray, list[int]], test: tuple[np.ndarray, list[int]]) -> Path:
    d = Path(root) / "cifar-100-python"
    d.mkdir(parents=True, exist_ok=True)
    for name, (images, labels) in (("train", train), ("test", test)):
        _pickle(d / name, {"data": _rows(images), "fine_labels": list(labels),
                           "coarse_labels": [y // 5 for y in labels]})
    _pickle(d / "meta", {"fine_label_names": [f"fine{i}" for i in range(100)],
                         "coarse_label_names": [f"coarse{i}" for i in range(20)]})
    return Path(root)


def _rows(images: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3 * 32 * 32))


def solid(color, size=(40, 30), mode="RGB") -> Image.Image:
    return Image.new(mode, size, color)


# Oxford-IIIT Pet: oxford-iiit-pet/images/<Breed_name>_<n>.jpg and annotations/{trainval,test}.txt,
# lines "<image id> <class id 1..37> <species 1 cat | 2 dog> <breed id>".
PET_BREEDS = ["Abyssinian", "american_bulldog", "Bengal"]  # class ids 1, 2, 3


def write_pets(root: Path, per_split: dict[str, int]) -> Path:
    base = Path(root) / "oxford-iiit-pet"
    (base / "images").mkdir(parents=True, exist_ok=True)
    (base / "annotations").mkdir(parents=True, exist_ok=True)
    n = 0
    for split, count in per_split.items():
        lines = []
        for i in range(count):
            n += 1
            cls = i % len(PET_BREEDS)
            image_id = f"{PET_BREEDS[cls]}_{n}"
            solid((20 * cls, 100, 200)).save(base / "images" / f"{image_id}.jpg")
            lines.append(f"{image_id} {cls + 1} {1 if PET_BREEDS[cls][0].isupper() else 2} {i + 1}")
        (base / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return Path(root)


# MATLAB v5 MAT-files (MathWorks, "MAT-File Format", level 5): a 128-byte header (text, subsystem
# offset, version 0x0100, endian indicator "IM" on little-endian), then data elements, each an 8-byte
# tag (type, byte count) and data padded to 8 bytes. A numeric matrix is a miMATRIX element holding
# array flags (miUINT32), dimensions (miINT32), name (miINT8) and the real part, which MATLAB may
# store in a smaller integer type than its class. miCOMPRESSED wraps an element in zlib.
MI_INT8, MI_UINT16, MI_INT32, MI_UINT32, MI_DOUBLE, MI_MATRIX, MI_COMPRESSED = 1, 4, 5, 6, 9, 14, 15
MX_DOUBLE = 6


def _element(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def _matrix(name: str, values: np.ndarray, stored_as: int) -> bytes:
    values = np.atleast_2d(values)
    real = values.ravel(order="F").astype({MI_DOUBLE: "<f8", MI_UINT16: "<u2"}[stored_as]).tobytes()
    body = (_element(MI_UINT32, struct.pack("<II", MX_DOUBLE, 0))
            + _element(MI_INT32, struct.pack(f"<{values.ndim}i", *values.shape))
            + _element(MI_INT8, name.encode())
            + _element(stored_as, real))
    return _element(MI_MATRIX, body)


def write_mat(path: Path, arrays: dict[str, np.ndarray], *, compress: bool = False,
              stored_as: int = MI_DOUBLE) -> Path:
    header = b"MATLAB 5.0 MAT-file, written by benchbench tests".ljust(116, b" ") + b"\0" * 8
    out = header + struct.pack("<H", 0x0100) + b"IM"
    for name, values in arrays.items():
        element = _matrix(name, np.asarray(values, dtype=np.float64), stored_as)
        out += struct.pack("<II", MI_COMPRESSED, len(z := zlib.compress(element))) + z if compress else element
    Path(path).write_bytes(out)
    return Path(path)


def write_flowers(root: Path, labels: list[int], trnid: list[int], valid: list[int], tstid: list[int]) -> Path:
    """root/flowers-102/: jpg/image_00001.jpg ... (one per label), imagelabels.mat ('labels', 1..102),
    setid.mat ('trnid', 'valid', 'tstid': 1-based image ids)."""
    base = Path(root) / "flowers-102"
    (base / "jpg").mkdir(parents=True, exist_ok=True)
    for i, label in enumerate(labels, start=1):
        solid((label, 50, 50), size=(50, 40)).save(base / "jpg" / f"image_{i:05d}.jpg")
    write_mat(base / "imagelabels.mat", {"labels": np.array([labels])}, compress=True, stored_as=MI_UINT16)
    write_mat(base / "setid.mat", {"trnid": np.array([trnid]), "valid": np.array([valid]),
                                   "tstid": np.array([tstid])})
    return Path(root)


def write_class_folders(root: Path, splits: dict[str, dict[str, list[Image.Image]]], ext: str = "png") -> Path:
    """root/<split>/<class>/<n>.<ext> for each image."""
    for split, classes in splits.items():
        for cls, images in classes.items():
            d = Path(root) / split / cls
            d.mkdir(parents=True, exist_ok=True)
            for i, img in enumerate(images):
                img.save(d / f"{i}.{ext}")
    return Path(root)
