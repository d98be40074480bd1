"""Reader for the IDX format of (Fashion-)MNIST, plain or gzip-compressed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from benchbench.errors import BenchError

# type code -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class IdxError(BenchError):
    pass


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an IDX file; IdxError names the file and what is wrong with it."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as exc:  # EOFError: a gzip stream cut short
        raise IdxError(f"{path}: cannot read IDX file ({exc}); re-download or reinstall it") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise IdxError(f"{path}: not an IDX file (bad magic number {data[:4].hex() or 'empty'})")
    code, ndim = data[2], data[3]
    if code not in _DTYPES:
        raise IdxError(f"{path}: unknown IDX type code 0x{code:02x}; allowed: "
                       + ", ".join(f"0x{c:02x}" for c in _DTYPES))
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxError(f"{path}: truncated IDX header ({len(data)} bytes, expected at least {header})")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_DTYPES[code])
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise IdxError(
            f"{path}: IDX file {what}: header says shape {shape} ({expected} bytes), file has "
            f"{len(data)} bytes; re-download or reinstall it"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))
