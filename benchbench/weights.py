"""Reading checkpoint files into tensors without trusting them: .safetensors, torch files and .npz.

Nothing runs code from a file and nothing is allocated from a size the file declares before that
size is checked. A .safetensors header is validated in full first (its length against the file,
every tensor's dtype, shape and byte range, no overlaps or gaps); torch files load with
`weights_only=True` after their archive's sizes are checked against a budget; an .npz is checked from
its arrays' headers. A file that fails is a BenchError naming it and what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchbench.errors import BenchError

if TYPE_CHECKING:  # torch, numpy and safetensors are imported where a file is read
    import numpy as np
    import torch

SAFETENSORS_SUFFIX = ".safetensors"
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
NPZ_SUFFIX = ".npz"
SUFFIXES = (SAFETENSORS_SUFFIX, *TORCH_SUFFIXES, NPZ_SUFFIX)
# The safetensors library refuses headers over 100 MB; a header lists names, dtypes, shapes and offsets,
# a few hundred bytes a tensor, so even 100,000 tensors stay far below.
MAX_HEADER_BYTES = 100_000_000
# Bytes per element of each dtype the safetensors format names that torch holds.
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
METADATA_KEY = "__metadata__"
HASH_CHUNK = 2**24


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a .safetensors header: dtype, shape, and its byte range in the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def sha256_of(path: Path) -> str:
    """The file's sha256, hex, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_safetensors_header(path: Path) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """The validated header of a .safetensors file: its tensors and its `__metadata__` (str -> str).

    Checks, before any tensor is read: an 8-byte little-endian header length within the file and at
    most MAX_HEADER_BYTES; a JSON object; each tensor's dtype known, shape a list of non-negative ints,
    data_offsets [begin, end] inside the data section with end - begin = product(shape) x itemsize;
    and the tensors tiling the data section exactly (no overlap, no gap, nothing after the last one).
    """
    size = path.stat().st_size
    where = f"checkpoint {path}"
    if size < 8:
        raise BenchError(f"{where}: {size} bytes, too short for a .safetensors file (its first 8 bytes give the "
                         "header's length); is it complete?")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES or n > size - 8:
            raise BenchError(f"{where}: its header declares {n:,} bytes, but the file holds {size - 8:,} after the "
                             f"length field (and headers are at most {MAX_HEADER_BYTES:,}); a truncated or "
                             "forged .safetensors file, refused before reading")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BenchError(f"{where}: its .safetensors header is not JSON ({e}); a truncated or foreign file") from None
    if not isinstance(header, dict):
        raise BenchError(f"{where}: its .safetensors header is a JSON {type(header).__name__}, not an object")
    meta = header.pop(METADATA_KEY, {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise BenchError(f"{where}: its {METADATA_KEY} must map strings to strings")
    data = size - 8 - n
    entries = {name: _entry(where, name, e, data) for name, e in header.items()}
    at, last = 0, None
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin < at:
            raise BenchError(f"{where}: tensors {last!r} and {e.name!r} overlap (bytes {e.begin:,}-{e.end:,} of the "
                             f"data section, {last!r} ends at {at:,}); a forged .safetensors header, refused")
        if e.begin > at:
            raise BenchError(f"{where}: bytes {at:,}-{e.begin:,} of the data section belong to no tensor (before "
                             f"{e.name!r}); a malformed .safetensors file, refused")
        at, last = e.end, e.name
    if at != data:
        raise BenchError(f"{where}: its tensors end at byte {at:,} of a {data:,}-byte data section; a malformed "
                         ".safetensors file, refused")
    return entries, meta


def _entry(where: str, name: Any, e: Any, data: int) -> TensorEntry:
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise BenchError(f"{where}: header entry {name!r} must have exactly dtype, shape and data_offsets")
    dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
    if dtype not in SAFETENSORS_DTYPES:
        raise BenchError(f"{where}: tensor {name!r} has dtype {dtype!r}; allowed: {', '.join(SAFETENSORS_DTYPES)}")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise BenchError(f"{where}: tensor {name!r} has shape {shape!r}; a shape is a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise BenchError(f"{where}: tensor {name!r} has data_offsets {offsets!r}; expected [begin, end] with "
                         "0 <= begin <= end")
    begin, end = offsets
    if end > data:
        raise BenchError(f"{where}: tensor {name!r} spans bytes {begin:,}-{end:,}, past the end of the "
                         f"{data:,}-byte data section; a truncated or forged .safetensors file, refused before reading")
    nbytes = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
    if end - begin != nbytes:
        raise BenchError(f"{where}: tensor {name!r} of shape {shape} and dtype {dtype} needs {nbytes:,} bytes, but "
                         f"its data_offsets span {end - begin:,}; a forged .safetensors header, refused before reading")
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a .safetensors file and its metadata, the header validated first."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    entries, meta = read_safetensors_header(path)
    try:
        tensors = load_file(path, device="cpu")
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise BenchError(f"checkpoint {path}: cannot read its tensors ({type(e).__name__}: {e})") from e
    if tensors.keys() != entries.keys():  # the library read the same header
        raise BenchError(f"checkpoint {path}: its tensors changed while it was read")
    return tensors, meta


def unreadable(path: Path, e: BaseException) -> BenchError:
    """A torch or numpy failure on a torn or foreign file as a BenchError naming the file."""
    text = str(e).strip()
    # torch's weights-only message is long; its cause sits after "WeightsUnpickler error:".
    m = re.search(r"WeightsUnpickler error:\s*(.+?)(?: was not an allowed global|\n\n|$)", text, re.S)
    detail = " ".join(m.group(1).split()) if m else (text.splitlines() or [""])[0]
    detail = detail.split(". ")[0][:200]  # the first sentence says what failed
    reason = f"{type(e).__name__}: {detail}" if detail else type(e).__name__
    if "Unsupported global" in detail:
        hint = ("it holds objects other than tensors and plain values; checkpoints are read with "
                "weights_only=True, which runs no code from the file")
    else:
        hint = "is it complete, and a checkpoint (benchbench's, timm's, torchvision's, or the paper's .npz)?"
    return BenchError(f"checkpoint {path}: cannot read it ({reason}); {hint}")


def read_torch(path: Path, budget_bytes: int) -> Any:
    """A torch file (torch.save's zip archive, or the legacy format) loaded with weights_only=True, after the
    archive's members are checked to declare no more than `budget_bytes` uncompressed in all."""
    import torch

    _check_archive(path, budget_bytes)
    try:
        # weights_only: a checkpoint is data; never run code from a pickle.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for torn or foreign files
        raise unreadable(path, e) from e


def _check_archive(path: Path, budget_bytes: int) -> None:
    try:
        with zipfile.ZipFile(path) as zf:
            total = sum(info.file_size for info in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # the legacy format, or not an archive: torch.load reads (or refuses) it, reading only what it holds
    if total > budget_bytes:
        raise BenchError(f"checkpoint {path}: its archive declares {total:,} bytes uncompressed, beyond the "
                         f"{budget_bytes:,} any checkpoint of this model could need; refused before reading")


def read_npz(path: Path, budget_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, its .npy headers checked first against the members and the budget."""
    import numpy as np

    _check_npz_sizes(path, budget_bytes)
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with npz:
            return {k: npz[k] for k in npz.files}
    except Exception as e:  # zipfile, numpy and OS errors for torn or foreign files
        raise unreadable(path, e) from e


def _check_npz_sizes(path: Path, budget: int) -> None:
    """Reads only the .npy headers: refuses an array whose declared size exceeds what its archive member
    holds, or declared sizes in all beyond `budget`, before numpy allocates them."""
    import numpy as np

    total = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read = {(1, 0): np.lib.format.read_array_header_1_0,
                            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                    if read is None:
                        continue  # numpy reads (or refuses) other versions itself
                    shape, _, dtype = read(f, max_header_size=10_000)
                nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
                name = info.filename.removesuffix(".npy")
                if nbytes > info.file_size:
                    raise BenchError(f"checkpoint {path}: array {name!r} declares shape {list(shape)} of {dtype} "
                                     f"({nbytes:,} bytes), but its archive member holds {info.file_size:,}; refused "
                                     "before reading (a torn or forged file)")
                total += nbytes
                if total > budget:
                    raise BenchError(f"checkpoint {path}: its arrays declare {total:,} bytes or more (array {name!r}: "
                                     f"shape {list(shape)} of {dtype}), beyond the {budget:,} any checkpoint of "
                                     "this model could need; refused before reading")
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return  # not a readable archive: np.load says so, naming the file


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a checkpoint's folder (config.json, preprocessor_config.json)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BenchError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(obj, Mapping):
        raise BenchError(f"{path}: a JSON {type(obj).__name__}, expected an object")
    return dict(obj)
