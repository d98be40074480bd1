"""Saving and loading model weights: our own .pt files and the paper's code-release .npz files.

A load is all or nothing: the checkpoint is converted, adapted (position embeddings resized to the
model's grid) and checked against the model's state dict first; the model is touched only when
every key and shape fits, and (unless allowed) every weight is finite. An .npz whose array headers
ask for more memory than the model could need is refused before any array is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchbench.errors import BenchError
from benchbench.specs import AdaptsStateDict, NpzLayout

FORMAT = "benchbench/1"
TORCH_SUFFIXES = (".pt", ".pth")
NPZ_SUFFIX = ".npz"
# The classifier and, in vit_jax checkpoints, the pre-logits representation layer before it.
HEAD_PREFIXES = ("head.", "head/", "pre_logits.", "pre_logits/")
MAX_LISTED = 10  # names shown per group in a mismatch error
# A checkpoint holds one model's weights (maybe with a bigger head, or position embeddings for a bigger
# grid): .npz headers declaring more than this many times the model's bytes, plus a margin, are refused.
NPZ_BUDGET_FACTOR, NPZ_BUDGET_MARGIN = 4, 64 * 2**20
NONFINITE_META = "nonfinite_accepted"  # meta of a checkpoint saved from weights that were knowingly non-finite
_META_TYPES = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class LoadReport:
    """What `load_checkpoint` did."""

    path: str
    source: str  # "benchbench/1", "state dict", or the name of the spec's npz layout
    keys_loaded: int
    pos_embed_resized: bool
    head_dropped: bool
    dropped_keys: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)


def save_checkpoint(model: nn.Module, path: str | os.PathLike, /, **meta: Any) -> Path:
    """Write `model`'s weights and `meta` (model id, resolution, num_classes, ...) to a .pt file.

    Written to a temporary file and renamed, so an interrupted save never leaves a torn checkpoint.
    `meta` holds plain values only (str, int, float, bool, None, lists, tuples, dicts) so that the
    file loads with `torch.load(weights_only=True)`.
    """
    path = Path(path)
    if path.suffix.lower() not in TORCH_SUFFIXES:
        raise BenchError(f"checkpoint {path}: unknown suffix {path.suffix!r}; allowed: {', '.join(TORCH_SUFFIXES)}")
    _check_meta(meta, "meta")
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save({"format": FORMAT, "state_dict": model.state_dict(), "meta": meta}, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _check_meta(value: Any, where: str) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"checkpoint {where}: key {k!r} is not a string")
            _check_meta(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_meta(v, f"{where}[{i}]")
    elif not isinstance(value, _META_TYPES):
        raise TypeError(f"checkpoint {where} = {value!r} ({type(value).__name__}) is not a plain value; "
                        "allowed: str, int, float, bool, None, and lists, tuples and dicts of them")


def load_checkpoint(model: nn.Module, path: str | os.PathLike, *, drop_head: bool = False,
                    npz_layout: NpzLayout | None = None, allow_nonfinite: bool = False) -> LoadReport:
    """Load weights from `path` into `model`, all or nothing.

    `path` is one of ours (.pt/.pth, from `save_checkpoint`, or a bare state dict) or a .npz in the
    layout of the paper's code release, converted by `npz_layout` (the model spec's).
    Position embeddings from another resolution are resized to the model's grid.
    `drop_head=True` keeps the model's own head (and drops a vit_jax `pre_logits` layer): for
    fine-tuning to another number of classes.
    A tensor holding NaN or infinite values is refused unless `allow_nonfinite` (or the checkpoint was
    saved with `benchbench convert --allow-nonfinite`, which marks it so).
    Raises BenchError, with the model untouched, when the file cannot be read or does not fit.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"checkpoint {path}: no such file")
    suffix = path.suffix.lower()
    if suffix == NPZ_SUFFIX:
        sd, source, meta = _read_npz(path, model, npz_layout)
    elif suffix in TORCH_SUFFIXES:
        sd, source, meta = _read_torch(path)
    else:
        raise BenchError(f"checkpoint {path}: unknown suffix {path.suffix!r}; allowed: "
                         f"{', '.join(TORCH_SUFFIXES)} (benchbench), {NPZ_SUFFIX} (the paper's code release)")

    resized = False
    if isinstance(model, AdaptsStateDict):
        before = sd.get("pos_embed")
        try:
            sd = model.adapt_state_dict(sd)
        except ValueError as e:
            raise BenchError(f"checkpoint {path}: {e}") from e
        resized = before is not None and sd.get("pos_embed") is not before

    own = model.state_dict()
    dropped: tuple[str, ...] = ()
    kept: dict[str, torch.Tensor] = {}
    if drop_head:
        dropped = tuple(k for k in sd if k.startswith(HEAD_PREFIXES))
        kept = {k: v.clone() for k, v in own.items() if k.startswith(HEAD_PREFIXES)}  # the model's own head
        sd = {k: v for k, v in sd.items() if k not in dropped} | kept

    _check_fits(path, model, sd, own)
    if not (allow_nonfinite or meta.get(NONFINITE_META) is True):
        _check_finite(path, {k: v for k, v in sd.items() if k not in kept})
    model.load_state_dict(sd, strict=True)
    return LoadReport(path=str(path), source=source, keys_loaded=len(sd) - len(kept), pos_embed_resized=resized,
                      head_dropped=bool(dropped), dropped_keys=dropped, meta=meta)


def _unreadable(path: Path, e: BaseException) -> BenchError:
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
        hint = "is it complete, and written by benchbench or the paper's code release?"
    return BenchError(f"checkpoint {path}: cannot read it ({reason}); {hint}")


def _read_torch(path: Path) -> tuple[dict[str, torch.Tensor], str, dict]:
    try:
        # weights_only: a checkpoint is data; never run code from a pickle.
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for torn or foreign files
        raise _unreadable(path, e) from e
    if isinstance(obj, Mapping) and "format" in obj:
        if obj["format"] != FORMAT:
            raise BenchError(f"checkpoint {path}: format {obj['format']!r} is not known; allowed: {FORMAT!r}")
        sd, meta, source = obj.get("state_dict"), obj.get("meta", {}), FORMAT
    else:
        sd, meta, source = obj, {}, "state dict"
    if not isinstance(sd, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in sd.items()):
        raise BenchError(f"checkpoint {path}: holds neither a benchbench checkpoint (format {FORMAT!r}) "
                         "nor a state dict (parameter names -> tensors)")
    return dict(sd), source, dict(meta) if isinstance(meta, Mapping) else {}


def _read_npz(path: Path, model: nn.Module, layout: NpzLayout | None) -> tuple[dict[str, torch.Tensor], str, dict]:
    if layout is None:
        raise BenchError(f"checkpoint {path}: no .npz layout is known for {type(model).__name__} (its model "
                         "spec declares none); .npz files load into the families whose spec has an npz_layout")
    _check_npz_sizes(path, model)
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:  # zipfile, numpy and OS errors for torn or foreign files
        raise _unreadable(path, e) from e
    try:
        sd = layout.convert(arrays, model)
    except ValueError as e:
        raise BenchError(f"checkpoint {path}: {e}") from e
    return sd, layout.name, {}


def _listed(names: list[str]) -> str:
    shown = names[:MAX_LISTED]
    more = f", ... and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return ", ".join(shown) + more if names else "none"


def _check_fits(path: Path, model: nn.Module, sd: Mapping[str, torch.Tensor],
                own: Mapping[str, torch.Tensor]) -> None:
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    mismatched = [(k, tuple(sd[k].shape), tuple(own[k].shape)) for k in own
                  if k in sd and sd[k].shape != own[k].shape]
    if not (missing or unexpected or mismatched):
        return
    lines = [f"checkpoint {path} does not fit the model ({type(model).__name__}); nothing was loaded",
             f"  missing from the checkpoint ({len(missing)}): {_listed(missing)}",
             f"  unexpected in the checkpoint ({len(unexpected)}): {_listed(unexpected)}",
             f"  shape mismatches ({len(mismatched)}):" + ("" if mismatched else " none")]
    lines += [f"    {k}: checkpoint {list(a)}, model {list(b)}" for k, a, b in mismatched[:MAX_LISTED]]
    if len(mismatched) > MAX_LISTED:
        lines.append(f"    ... and {len(mismatched) - MAX_LISTED} more")
    names = missing + unexpected + [k for k, _, _ in mismatched]
    if all(k.startswith(HEAD_PREFIXES) for k in names):
        lines.append("  only the classification head differs: load with drop_head=True to keep the model's "
                     "own zero-initialised head (fine-tuning to another number of classes)")
    raise BenchError("\n".join(lines))


def _check_finite(path: Path, sd: Mapping[str, torch.Tensor]) -> None:
    bad = [(k, v) for k, v in sd.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        name, v = bad[0]
        nan, inf = int(torch.isnan(v).sum()), int(torch.isinf(v).sum())
        more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
        raise BenchError(f"checkpoint {path}: tensor {name!r} holds {nan:,} NaN and {inf:,} infinite values of "
                         f"{v.numel():,}{more}; refused, as a model from it computes NaN. If that is intended, "
                         "load with allow_nonfinite=True, or save it with `benchbench convert --allow-nonfinite`")


def _check_npz_sizes(path: Path, model: nn.Module) -> None:
    """Reads only the .npy headers: refuses an array whose declared size exceeds what its archive member
    holds, or declared sizes in all beyond what the model could need, before numpy allocates them."""
    import zipfile

    budget = NPZ_BUDGET_FACTOR * sum(t.numel() * t.element_size() for t in model.state_dict().values()) \
        + NPZ_BUDGET_MARGIN
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
                                     f"{type(model).__name__} could need; refused before reading")
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return  # not a readable archive: np.load below says so, naming the file
