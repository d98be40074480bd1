"""A reader of MATLAB v5 .mat files: their real numeric arrays, zlib-compressed or not.

torchvision reads Flowers-102's label files with scipy, which benchbench does not depend on.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from benchbench.errors import BenchError

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
