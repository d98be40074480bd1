"""Reading checkpoint files into tensors without trusting them: .safetensors, torch files and .npz.

Nothing runs code from a file and nothing is allocated from a size the file declares before that
size is checked. A .safetensors header is validated in full first (its length against the file,
every tensor's dtype, shape and byte range, no overlaps or gaps); torch files load with
`weights_only=True` after the sizes they declare are checked against the file and a budget (a zip
archive's members, or a legacy file's storages, read from its pickles without running them); an .npz
is checked from its members' zip headers and its arrays' .npy headers (benchbench.archives), and holds
numbers only. A file that fails is a BenchError naming it and what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchbench.archives import ArchiveError, members, npz_arrays
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
    """A torch file (torch.save's zip archive, or the legacy format) loaded with weights_only=True, after
    the sizes it declares are checked against the file and `budget_bytes` (`check_torch_sizes`)."""
    import torch

    check_torch_sizes(path, budget_bytes)
    try:
        # weights_only: a checkpoint is data; never run code from a pickle.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for torn or foreign files
        raise unreadable(path, e) from e


ZIP_MAGIC = b"PK\x03\x04"  # what torch.load looks for to read a file as its zip archive


def check_torch_sizes(path: Path, budget: int) -> None:
    """What torch.load would allocate, checked first. A file starting as a zip archive (torch.save's
    format since torch 1.6: stored members only) must open as one and pass `archives.members`; any other
    is the legacy format (consecutive pickles, then each storage's bytes), whose storages' declared
    sizes (`_legacy_storage_bytes`) must fit in the file and the budget."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == ZIP_MAGIC:
        try:
            members(path, stored_only=True, budget=budget, budget_is="any checkpoint of this model could need")
        except ArchiveError as e:
            raise BenchError(f"checkpoint {path}: {e}; refused before reading") from None
        return
    declared, left = _legacy_storage_bytes(path)
    if declared > min(left, budget):
        raise BenchError(f"checkpoint {path}: its storages declare {declared:,} bytes, but the file holds "
                         f"{left:,} after its pickles (and a checkpoint of this model needs at most {budget:,}); "
                         "a torn or forged torch file, refused before reading")


# Bytes per element of the storage types a legacy torch file names (torch.<Name>Storage).
_STORAGE_BYTES = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                  "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Untyped": 1}


class _Stub:
    """Whatever a scanned pickle names or builds: made without running anything, and taking any state."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Stub":
        return _Stub()


class _StorageScan(pickle.Unpickler):
    """An unpickler that imports nothing (every global is a `_Stub` class) and notes each storage a legacy
    torch pickle declares: {root key: bytes}."""

    def __init__(self, f) -> None:
        super().__init__(f)
        self.storages: dict[str, int] = {}

    def find_class(self, module: str, name: str) -> type:
        return type(name, (_Stub,), {"global_name": f"{module}.{name}"})

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage"):
            kind = getattr(pid[1], "global_name", "")
            size = _STORAGE_BYTES.get(kind.removeprefix("torch.").removesuffix("Storage"), 16)
            numel = pid[4]
            if type(numel) is not int or numel < 0:
                raise pickle.UnpicklingError(f"a storage of {numel!r} elements")
            self.storages[str(pid[2])] = max(self.storages.get(str(pid[2]), 0), numel * size)
        return _Stub()


def _legacy_storage_bytes(path: Path) -> tuple[int, int]:
    """(bytes the storages of a legacy torch file declare, bytes of the file after its pickles): its five
    pickles (magic number, protocol, system info, the object, the storage keys) read by `_StorageScan`.
    BenchError when they do not read (torch.load could not either)."""
    with open(path, "rb") as f:
        scan = _StorageScan(f)
        try:
            for _ in range(5):
                scan.load()
        except Exception as e:  # noqa: BLE001 - any fault of a torn or foreign pickle
            raise unreadable(path, e) from None
        return sum(scan.storages.values()), path.stat().st_size - f.tell()


def read_npz(path: Path, budget_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, every member's declared size checked first (`archives.npz_arrays`),
    each a number array (bool, integer or float) in this machine's byte order."""
    import numpy as np

    try:
        headers = npz_arrays(path, budget=budget_bytes, budget_is="any checkpoint of this model could need")
    except ArchiveError as e:
        raise BenchError(f"checkpoint {path}: {e}; refused before reading") from None
    for name, h in headers.items():
        if h.dtype.kind not in "biuf" or h.dtype.shape or h.dtype.names:
            raise BenchError(f"checkpoint {path}: array {name!r} is of dtype {h.dtype}; a checkpoint's arrays "
                             "are numbers (bool, integer, float)")
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:  # zipfile, numpy and OS errors for torn or foreign files
        raise unreadable(path, e) from e
    return {k: v if v.dtype.isnative else v.astype(v.dtype.newbyteorder("=")) for k, v in arrays.items()}


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a checkpoint's folder (config.json, preprocessor_config.json)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BenchError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(obj, Mapping):
        raise BenchError(f"{path}: a JSON {type(obj).__name__}, expected an object")
    return dict(obj)
