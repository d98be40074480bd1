"""Writers for tiny IDX files in (Fashion-)MNIST's on-disk format, for tests."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">i2"): 0x0B, np.dtype(">i4"): 0x0C,
         np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}


def idx_bytes(array: np.ndarray) -> bytes:
    array = np.asarray(array)
    big = array.astype(array.dtype.newbyteorder(">")) if array.dtype.itemsize > 1 else array
    header = struct.pack(">BBBB", 0, 0, CODES[big.dtype], array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + big.tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        Path(path).write_bytes(data)
    return Path(path)


def learnable_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """28x28 uint8 images whose class (0..9) is a bright horizontal band at row 2 * label + 4."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    images = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
    for i, y in enumerate(labels):
        images[i, 2 * y + 4: 2 * y + 6, 4:24] = 250
    return images, labels


def write_fashion_mnist(root: Path, n_train: int = 300, n_test: int = 100, gz: bool = True) -> Path:
    """A Fashion-MNIST-shaped data root (root/fashion-mnist/*-ubyte[.gz]) with learnable images."""
    d = Path(root) / "fashion-mnist"
    d.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    for split, prefix, n, seed in (("train", "train", n_train, 0), ("test", "t10k", n_test, 1)):
        images, labels = learnable_images(n, seed)
        write_idx(d / f"{prefix}-images-idx3-ubyte{ext}", images)
        write_idx(d / f"{prefix}-labels-idx1-ubyte{ext}", labels)
    return Path(root)
