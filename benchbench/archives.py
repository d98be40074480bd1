"""Zip archives a user hands us (an .npz of arrays, a torch file): every member's declared size checked
against the file before anything is read or allocated from it.

`members` opens the archive (zip64 included: Python's zipfile reads its extra fields) and checks each
member: not encrypted, stored or deflated (numpy writes those; torch writes stored members only), its
compressed bytes inside the file, a stored member's size its compressed size, a deflated member's at
most `DEFLATE_MAX_RATIO` times its compressed size (what deflate can expand to; more is a lie a reader
would allocate for), and the declared sizes in all within a budget. `npy_header` reads one .npy
header, of any version numpy writes (1.0, 2.0, 3.0), without numpy's reader; `npz_arrays` checks every
member of an .npz is a .npy array whose header's shape and dtype need exactly the bytes its member
holds. Each refusal is an `ArchiveError` saying what is wrong; callers name the file.
"""

from __future__ import annotations

import ast
import math
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Deflate turns at most 258 repeated bytes into about 2 bits: 1,032 to 1; 1,100 leaves room for headers.
DEFLATE_MAX_RATIO = 1100
NPY_MAGIC = b"\x93NUMPY"
NPY_MAX_HEADER = 10_000  # numpy's own limit on a header's length (np.load's max_header_size)
_LOCAL_HEADER = 30  # bytes of a zip local file header before its name


class ArchiveError(ValueError):
    """An archive, or a member of it, that is refused before it is read (why, in words)."""


@dataclass(frozen=True)
class NpyHeader:
    """One .npy header: the array's shape, dtype and order, where its data starts, and its data's bytes."""

    shape: tuple[int, ...]
    dtype: Any  # numpy.dtype
    fortran_order: bool
    data_offset: int
    nbytes: int


def members(path: Path, *, stored_only: bool = False, budget: int | None = None, budget_is: str = "allowed",
            arrays: bool = False) -> list[zipfile.ZipInfo]:
    """The members of the zip archive `path`, each checked (see the module docstring); ArchiveError if
    it is no readable archive or a member declares what the file cannot hold. `stored_only`: a deflated
    member is refused too (torch files); `budget`: the most bytes the members may declare in all (what
    it is, in words: `budget_is`); `arrays`: members are named as an .npz's arrays (`x`, not `x.npy`)."""
    size = Path(path).stat().st_size
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except Exception as exc:  # noqa: BLE001 - zipfile raises many types for a torn or forged directory
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {_first(exc)})") from None
    allowed = {zipfile.ZIP_STORED: "stored"} if stored_only else {zipfile.ZIP_STORED: "stored",
                                                                  zipfile.ZIP_DEFLATED: "deflated"}
    total = 0
    for info in infos:
        name = f"array {info.filename.removesuffix('.npy')!r}" if arrays else f"member {info.filename!r}"
        if info.flag_bits & 0x1:
            raise ArchiveError(f"{name} is encrypted")
        if info.compress_type not in allowed:
            raise ArchiveError(f"{name} is compressed with zip method {info.compress_type}; allowed: "
                               + ", ".join(allowed.values()))
        end = info.header_offset + _LOCAL_HEADER + len(info.orig_filename.encode("utf-8", "surrogateescape")) \
            + info.compress_size
        if info.header_offset < 0 or end > size:
            raise ArchiveError(f"{name} declares {info.compress_size:,} bytes at offset "
                               f"{info.header_offset:,}, past the end of the {size:,}-byte file (torn or forged)")
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise ArchiveError(f"{name} is stored, yet declares {info.file_size:,} bytes from "
                               f"{info.compress_size:,} (forged)")
        if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
            raise ArchiveError(f"{name} declares {info.file_size:,} bytes from {info.compress_size:,} "
                               f"compressed, more than deflate can expand to (forged)")
        total += info.file_size
        if budget is not None and total > budget:
            raise ArchiveError(f"its members declare {total:,} bytes or more uncompressed ({name}: "
                               f"{info.file_size:,}), beyond the {budget:,} {budget_is}")
    return infos


def npy_header(f, member_size: int) -> NpyHeader:
    """The header of the .npy array `f` is at the start of (a file of `member_size` bytes); ArchiveError
    when it is none, or its shape and dtype need other than the bytes after it."""
    import numpy as np

    lead = f.read(8)
    if len(lead) < 8 or lead[:6] != NPY_MAGIC:
        raise ArchiveError("not a .npy array (no numpy magic)")
    version = (lead[6], lead[7])
    if version == (1, 0):
        width = 2
    elif version in ((2, 0), (3, 0)):
        width = 4
    else:
        raise ArchiveError(f".npy format version {version[0]}.{version[1]}; numpy writes 1.0, 2.0 and 3.0")
    raw_length = f.read(width)
    if len(raw_length) < width:
        raise ArchiveError("its .npy header is cut short")
    (length,) = struct.unpack("<H" if width == 2 else "<I", raw_length)
    if length > NPY_MAX_HEADER:
        raise ArchiveError(f"its .npy header declares {length:,} bytes (numpy's limit: {NPY_MAX_HEADER:,})")
    raw = f.read(length)
    if len(raw) < length:
        raise ArchiveError("its .npy header is cut short")
    try:
        header = ast.literal_eval(raw.decode("utf-8" if version == (3, 0) else "latin1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"its .npy header is not a Python literal ({type(exc).__name__})") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ArchiveError("its .npy header is not {'descr', 'fortran_order', 'shape'}")
    shape, fortran = header["shape"], header["fortran_order"]
    if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)) or type(fortran) is not bool:
        raise ArchiveError(f"its .npy header has shape {_short(shape)} and fortran_order {_short(fortran)}; "
                           "expected a tuple of non-negative integers and true/false")
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except Exception as exc:  # noqa: BLE001 - numpy raises several types for a descr it cannot make
        raise ArchiveError(f"its .npy dtype {_short(header['descr'])} is not one numpy reads "
                           f"({type(exc).__name__})") from None
    if dtype.hasobject:
        raise ArchiveError(f"its .npy dtype {dtype} holds Python objects (pickles), which are never read")
    offset = 8 + width + length
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes != member_size:
        raise ArchiveError(f"its .npy header declares shape {list(shape)} of {dtype} ({nbytes:,} bytes), but "
                           f"its member holds {member_size - offset:,} after the header (torn or forged)")
    return NpyHeader(tuple(shape), dtype, fortran, offset, nbytes)


def npz_arrays(path: Path, *, budget: int | None = None, budget_is: str = "allowed") -> dict[str, NpyHeader]:
    """{array name: its header} of the .npz archive `path`, every member checked (`members`) and a .npy
    array whose header fits its member exactly (`npy_header`); ArchiveError otherwise."""
    out: dict[str, NpyHeader] = {}
    infos = members(path, budget=budget, budget_is=budget_is, arrays=True)
    try:
        with zipfile.ZipFile(path) as zf:
            for info in infos:
                name = info.filename.removesuffix(".npy")
                with zf.open(info) as f:
                    try:
                        out[name] = npy_header(f, info.file_size)
                    except ArchiveError as exc:
                        raise ArchiveError(f"array {name!r}: {exc}") from None
    except ArchiveError:
        raise
    except Exception as exc:  # noqa: BLE001 - a member's bytes that do not inflate, a CRC, a torn file
        raise ArchiveError(f"a member cannot be read ({type(exc).__name__}: {_first(exc)})") from None
    return out


def _first(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
