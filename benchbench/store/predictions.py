"""A cell's per-image predictions on its test split: the arrays, the `.npz` file beside the records
(written atomically, named in the record with its sha256), and reading it back with every check.

A protocol that evaluates returns its `Predictions` under the metric name `METRIC`; the worker takes
it out of the metrics and `save`s it before the record is appended. The file
`<run>/predictions/<cell key>--<token>.npz` (the token tells apart two attempts at one cell) holds:

- `index` (images,): each image's index in the split; `label` (images,);
- `top5` (..., images, k): class ids, column 0 the top-1 prediction (k = min(5, classes));
- `p_true`, `p_top1` (..., images) float32: the true class's and the top-1 class's probabilities
  (softmax of the scores);
- `correct` (..., images) bool, only where a set's labels are multi-label (else top5[..., 0] == label);
- `axes` (strings): the names of the leading axes ("shot", "draw" for few-shot; none otherwise), and
  for each such axis an array of its values (`shot`: the k of each slice, `draw`: 0..draws-1);
- `cell_key`: the key of the cell that wrote it.
Class ids, labels and indices are stored in the smallest unsigned type that holds them.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from benchbench.archives import ArchiveError, npz_arrays
from benchbench.errors import BenchError

METRIC = "predictions"  # the name under which a protocol's metrics carry its Predictions
FOLDER = "predictions"
ARRAYS = ("index", "label", "top5", "p_true", "p_top1")


class PredictionsError(BenchError):
    """A predictions file that cannot be used: missing, unreadable, of another cell, or altered."""


@dataclass(frozen=True, eq=False)
class Predictions:
    index: np.ndarray  # (images,)
    label: np.ndarray  # (images,)
    top5: np.ndarray  # (*leading, images, k)
    p_true: np.ndarray  # (*leading, images)
    p_top1: np.ndarray  # (*leading, images)
    correct: np.ndarray | None = None  # (*leading, images): multi-label sets only
    axes: tuple[str, ...] = ()  # names of the leading axes
    axis_values: Mapping[str, np.ndarray] = field(default_factory=dict)  # axis name -> its values

    def __post_init__(self) -> None:
        n, lead = len(self.index), tuple(len(self.axis_values.get(a, ())) for a in self.axes)
        want = {"label": (n,), "p_true": (*lead, n), "p_top1": (*lead, n)}
        if self.correct is not None:
            want["correct"] = (*lead, n)
        for name, shape in want.items():
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(f"predictions: {name} has shape {np.shape(getattr(self, name))}, expected {shape}")
        if np.shape(self.top5)[:-1] != (*lead, n):
            raise ValueError(f"predictions: top5 has shape {np.shape(self.top5)}, expected {(*lead, n)} + (k,)")

    @property
    def images(self) -> int:
        return len(self.index)

    def hits(self) -> np.ndarray:
        """Whether each top-1 is right (*leading, images), bool."""
        if self.correct is not None:
            return np.asarray(self.correct, dtype=bool)
        return np.asarray(self.top5[..., 0], dtype=np.int64) == np.asarray(self.label, dtype=np.int64)

    def select(self, **at: int) -> "Predictions":
        """The slice at the given leading-axis positions (e.g. shot=2, draw=0), those axes dropped."""
        pos = tuple(at.pop(a, slice(None)) for a in self.axes)
        if at:
            raise KeyError(f"no axis {sorted(at)[0]!r}; axes: {', '.join(self.axes) or 'none'}")
        left = tuple(a for a, p in zip(self.axes, pos) if isinstance(p, slice))
        return Predictions(self.index, self.label, self.top5[pos], self.p_true[pos], self.p_top1[pos],
                           None if self.correct is None else self.correct[pos], left,
                           {a: self.axis_values[a] for a in left})


def stack(parts: list[Predictions], axis: str, values: list[int]) -> Predictions:
    """Predictions of the same images stacked along a new leading axis `axis` with `values`."""
    first = parts[0]
    return Predictions(first.index, first.label, np.stack([p.top5 for p in parts]),
                       np.stack([p.p_true for p in parts]), np.stack([p.p_top1 for p in parts]),
                       None if first.correct is None else np.stack([p.correct for p in parts]),
                       (axis, *first.axes), {axis: np.asarray(values), **first.axis_values})


def small_uint(values: np.ndarray) -> np.ndarray:
    """`values` (non-negative integers) in the smallest unsigned type that holds them."""
    values = np.asarray(values)
    top = int(values.max()) if values.size else 0
    if values.size and int(values.min()) < 0:
        raise ValueError("predictions: negative class id or index")
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values.astype(np.uint64)


def arrays(preds: Predictions, key: str) -> dict[str, np.ndarray]:
    """What the file holds (see the module docstring)."""
    out = {"index": small_uint(preds.index), "label": small_uint(preds.label), "top5": small_uint(preds.top5),
           "p_true": np.asarray(preds.p_true, dtype=np.float32), "p_top1": np.asarray(preds.p_top1, dtype=np.float32),
           "axes": np.asarray(preds.axes, dtype=str), "cell_key": np.asarray(key)}
    if preds.correct is not None:
        out["correct"] = np.asarray(preds.correct, dtype=bool)
    for axis in preds.axes:
        out[axis] = np.asarray(preds.axis_values[axis], dtype=np.int64)
    return out


def bytes_per_image(preds: Predictions, key: str = "") -> float:
    """The arrays' bytes per image before compression (the file's metadata left out)."""
    data = arrays(preds, key)
    return sum(data[n].nbytes for n in (*ARRAYS, "correct") if n in data) / max(1, preds.images)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(run_dir: Path, key: str, preds: Predictions) -> dict[str, Any]:
    """Write the cell's predictions under run_dir/predictions/ atomically (a temporary file, flushed
    and synced, then renamed) and return what the record names: {"path" (relative to the run),
    "sha256", "images"}."""
    folder = Path(run_dir) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}--{uuid.uuid4().hex[:8]}.npz"  # a key is a hash; be safe
    tmp = folder / f".{name}.tmp"
    with open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays(preds, key))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    return {"path": f"{FOLDER}/{name}", "sha256": sha256_of(folder / name), "images": preds.images}


# The most bytes a predictions file's arrays may declare in all: ImageNet's 50,000 test images take
# 1.2 MB, and 5 shots x 10 draws of them 60 MB; 1 GiB leaves room and keeps a forged file from a reader's memory.
MAX_BYTES = 2**30
_KINDS = {"index": "ui", "label": "ui", "top5": "ui", "p_true": "f", "p_top1": "f", "correct": "b", "axes": "U",
          "cell_key": "U"}
_KIND_NAMES = {"ui": "integers", "f": "floats", "b": "true/false", "U": "text"}


def inside_run(run_dir: Path, text: Any) -> Path:
    """run_dir / `text`, a record's relative path to a file of its run; PredictionsError when it is not
    a plain relative path (absolute, `..`, `.`, empty parts, a backslash, a NUL) or leads outside the
    run folder (through a link)."""
    if not isinstance(text, str) or not text:
        raise PredictionsError(f"the record names its predictions file by {text!r}, not a path inside its run")
    parts = text.split("/")
    if text.startswith("/") or "\\" in text or "\0" in text or any(p in ("", ".", "..") for p in parts):
        raise PredictionsError(f"the record names its predictions file {text!r}, a path that is not inside its run "
                               f"{run_dir}; refused")
    path = Path(run_dir).joinpath(*parts)
    try:
        outside = not path.resolve().is_relative_to(Path(run_dir).resolve())
    except (OSError, RuntimeError):  # a loop of links
        outside = True
    if outside:
        raise PredictionsError(f"predictions file {path} leads outside its run {run_dir} (a link); refused")
    return path


def _check_arrays(path: Path, headers: Mapping[str, Any], images: Any) -> None:
    """The arrays' names, kinds and shapes, from their headers alone (nothing read yet): what `load` and
    `Predictions` rely on; PredictionsError naming the first that is not."""
    missing = [n for n in (*ARRAYS, "axes", "cell_key") if n not in headers]
    if missing:
        raise PredictionsError(f"predictions file {path} lacks {', '.join(missing)}")
    for name, kinds in _KINDS.items():
        h = headers.get(name)
        if h is not None and (h.dtype.kind not in kinds or h.dtype.shape or h.dtype.names):
            raise PredictionsError(f"predictions file {path}: {name} is of dtype {h.dtype}, not "
                                   f"{_KIND_NAMES[kinds]}")
    n = headers["index"].shape
    if len(n) != 1 or n[0] < 1:
        raise PredictionsError(f"predictions file {path}: index has shape {list(n)}, expected (images,) with at "
                               "least one image")
    if type(images) is int and images != n[0]:
        raise PredictionsError(f"predictions file {path} holds {n[0]:,} images, the record {images:,}")
    if headers["cell_key"].shape != () or len(headers["axes"].shape) != 1:
        raise PredictionsError(f"predictions file {path}: cell_key must be one text and axes a list of texts")
    top5 = headers["top5"].shape
    if len(top5) < 2 or top5[-1] < 1:
        raise PredictionsError(f"predictions file {path}: top5 has shape {list(top5)}, expected (..., images, k) "
                               "with k of at least 1")


def load(run_dir: Path, ref: Mapping[str, Any], key: str) -> Predictions:
    """The predictions a record names (`ref`: its `predictions` field), checked: its path stays inside
    the run, the file exists, its sha256 is the recorded one, its zip members and arrays declare no more
    than they hold (benchbench.archives), its arrays are of the kinds and shapes above, and it is the
    cell `key`'s. PredictionsError says which failed; nothing else escapes (any fault decoding it is one)."""
    path = inside_run(Path(run_dir), ref.get("path"))
    if not path.is_file():
        raise PredictionsError(f"predictions file {path} is missing" if not os.path.lexists(path) else
                               f"predictions file {path} is not a regular file")
    if ref.get("sha256") != sha256_of(path):
        raise PredictionsError(f"predictions file {path}: sha256 differs from the record's (the file was altered "
                               "or replaced)")
    try:
        headers = npz_arrays(path, budget=MAX_BYTES, budget_is="a predictions file may hold")
    except ArchiveError as exc:
        raise PredictionsError(f"predictions file {path} cannot be read ({exc}); refused before reading") from None
    _check_arrays(path, headers, ref.get("images"))
    try:
        with np.load(path, allow_pickle=False) as z:
            axes = tuple(str(a) for a in z["axes"])
            wanted = [*ARRAYS, "axes", "cell_key", *(["correct"] if "correct" in headers else []), *axes]
            data = {name: z[name] for name in dict.fromkeys(wanted)}
        if str(data["cell_key"]) != key:
            raise PredictionsError(f"predictions file {path} is of cell {str(data['cell_key'])[:80]}, not {key}")
        return Predictions(data["index"], data["label"], data["top5"], data["p_true"], data["p_top1"],
                           data.get("correct"), axes, {a: data[a] for a in axes})
    except PredictionsError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy, zipfile, the OS: any fault decoding a file we were handed
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PredictionsError(f"predictions file {path} cannot be read ({type(exc).__name__}: {detail})") from None
