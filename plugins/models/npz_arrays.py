"""What the .npz converters of the paper's code release share: arrays to tensors, Flax axes to PyTorch's.

Conv kernels HWIO -> OIHW, dense kernels (in, out) -> (out, in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

Arrays = Mapping[str, np.ndarray]
StateDict = dict[str, torch.Tensor]
Rule = tuple[str, Callable[[np.ndarray], np.ndarray]]  # our name, the axis conversion


def tensor(name: str, a: np.ndarray) -> torch.Tensor:
    try:
        return torch.from_numpy(np.ascontiguousarray(a))
    except TypeError as e:
        raise ValueError(f"array {name!r} has dtype {a.dtype}, which torch cannot hold") from e


def same(a: np.ndarray) -> np.ndarray:
    return a


def conv(a: np.ndarray) -> np.ndarray:
    """HWIO -> OIHW."""
    return a.transpose(3, 2, 0, 1) if a.ndim == 4 else a


def dense(a: np.ndarray) -> np.ndarray:
    """(in, out) -> (out, in)."""
    return a.T if a.ndim == 2 else a
