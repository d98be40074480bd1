"""The BiT checkpoint layout (google-research/big_transfer: ResNet-v2 .npz) as our state dicts."""

from __future__ import annotations

import re

import numpy as np
from torch import nn

from benchbench.specs import NpzLayout
from benchbench_plugins.models.npz_arrays import Arrays, Rule, StateDict, conv, same, tensor


def _conv1x1_to_dense(a: np.ndarray) -> np.ndarray:
    """A 1x1 conv kernel (1, 1, C, K) used as a classifier -> Linear weight (K, C)."""
    return a[0, 0].T if a.ndim == 4 and a.shape[:2] == (1, 1) else conv(a)


_BIT_TOP: dict[str, Rule] = {
    "resnet/root_block/standardized_conv2d/kernel": ("stem.0.weight", conv),
    "resnet/group_norm/gamma": ("norm.weight", same),
    "resnet/group_norm/beta": ("norm.bias", same),
    "resnet/head/conv2d/kernel": ("head.weight", _conv1x1_to_dense),
    "resnet/head/conv2d/bias": ("head.bias", same),
}
_BIT_UNIT_RE = re.compile(r"resnet/block(\d+)/unit(\d+)/([abc])/(.+)")
_BIT_LAYER = {"a": "1", "b": "2", "c": "3"}  # BiT's a/b/c are our conv1/gn1 ... conv3/gn3


def _bit_rule(name: str) -> Rule | None:
    if name in _BIT_TOP:
        return _BIT_TOP[name]
    m = _BIT_UNIT_RE.fullmatch(name)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        return None
    s, u, letter, rest = m.groups()
    unit = f"stages.{int(s) - 1}.{int(u) - 1}"
    n = _BIT_LAYER[letter]
    if rest == "standardized_conv2d/kernel":
        return f"{unit}.conv{n}.weight", conv
    if rest in ("group_norm/gamma", "group_norm/beta"):
        return f"{unit}.gn{n}.{'weight' if rest.endswith('gamma') else 'bias'}", same
    if letter == "a" and rest == "proj/standardized_conv2d/kernel":
        return f"{unit}.downsample.weight", conv
    return None


def bit_from_npz(arrays: Arrays, model: nn.Module) -> StateDict:
    """A BiT checkpoint (big_transfer's ResNet-v2 .npz) as a state dict for our ResNetV2."""
    out: StateDict = {}
    for name, a in arrays.items():
        rule = _bit_rule(name)
        ours, fn = rule if rule else (name, same)
        out[ours] = tensor(name, fn(a))
    return out


LAYOUT = NpzLayout("bit npz", bit_from_npz)
