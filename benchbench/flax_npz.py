"""The paper's code-release checkpoints (.npz of flattened parameter trees) as our state dicts.

Two layouts: vit_jax (google-research/vision_transformer: ViT and the R50 hybrids) and BiT
(google-research/big_transfer: ResNet-v2). Each array name is translated to our module name and
its axes to PyTorch's order: conv kernels HWIO -> OIHW, dense kernels (in, out) -> (out, in).
A name the layout does not know is kept as it is, so that the loader reports it as unexpected
instead of dropping it; a key of ours the file lacks is reported as missing there too.
Converters raise ValueError for arrays that cannot be converted at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

Arrays = Mapping[str, np.ndarray]
StateDict = dict[str, torch.Tensor]

VIT_PREFIX = "opt/target/"  # some vit_jax checkpoints keep the optimiser's wrapping
_QKV = ("query", "key", "value")  # our qkv Linear is [q; k; v] along its output dim


def _tensor(name: str, a: np.ndarray) -> torch.Tensor:
    try:
        return torch.from_numpy(np.ascontiguousarray(a))
    except TypeError as e:
        raise ValueError(f"array {name!r} has dtype {a.dtype}, which torch cannot hold") from e


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _conv(a: np.ndarray) -> np.ndarray:
    """HWIO -> OIHW."""
    return a.transpose(3, 2, 0, 1) if a.ndim == 4 else a


def _dense(a: np.ndarray) -> np.ndarray:
    """(in, out) -> (out, in)."""
    return a.T if a.ndim == 2 else a


def _attn_in(a: np.ndarray) -> np.ndarray:
    """Query/key/value kernel (D, H, hd) -> (H*hd, D)."""
    return a.reshape(a.shape[0], -1).T


def _attn_out(a: np.ndarray) -> np.ndarray:
    """Output kernel (H, hd, D) -> (D, H*hd)."""
    return a.reshape(-1, a.shape[-1]).T


def _flat(a: np.ndarray) -> np.ndarray:
    """Query/key/value bias (H, hd) -> (H*hd,)."""
    return a.reshape(-1)


def _conv1x1_to_dense(a: np.ndarray) -> np.ndarray:
    """A 1x1 conv kernel (1, 1, C, K) used as a classifier -> Linear weight (K, C)."""
    return a[0, 0].T if a.ndim == 4 and a.shape[:2] == (1, 1) else _conv(a)


Rule = tuple[str, Callable[[np.ndarray], np.ndarray]]

# vit_jax encoder block: name below Transformer/encoderblock_{i}/ -> our name below blocks.{i}.
_VIT_BLOCK: dict[str, Rule] = {
    "LayerNorm_0/scale": ("ln1.weight", _same),
    "LayerNorm_0/bias": ("ln1.bias", _same),
    "MultiHeadDotProductAttention_1/out/kernel": ("attn.proj.weight", _attn_out),
    "MultiHeadDotProductAttention_1/out/bias": ("attn.proj.bias", _same),
    "LayerNorm_2/scale": ("ln2.weight", _same),
    "LayerNorm_2/bias": ("ln2.bias", _same),
    "MlpBlock_3/Dense_0/kernel": ("mlp.fc1.weight", _dense),
    "MlpBlock_3/Dense_0/bias": ("mlp.fc1.bias", _same),
    "MlpBlock_3/Dense_1/kernel": ("mlp.fc2.weight", _dense),
    "MlpBlock_3/Dense_1/bias": ("mlp.fc2.bias", _same),
}
_VIT_BLOCK_RE = re.compile(r"Transformer/encoderblock_(\d+)/(.+)")
_VIT_QKV_RE = re.compile(r"MultiHeadDotProductAttention_1/(query|key|value)/(kernel|bias)")
# vit_jax models_resnet.py, inside the hybrid: block{s+1}/unit{u+1}/{conv,gn}{1,2,3,_proj}.
_HYBRID_UNIT_RE = re.compile(r"block(\d+)/unit(\d+)/(conv[123]|conv_proj|gn[123]|gn_proj)/(kernel|scale|bias)")
_GN_PARAM = {"scale": "weight", "bias": "bias"}
_VIT_TOP: dict[str, Rule] = {
    "embedding/kernel": ("{embed}.weight", _conv),
    "embedding/bias": ("{embed}.bias", _same),
    "cls": ("cls_token", _same),
    "Transformer/posembed_input/pos_embedding": ("pos_embed", _same),
    "Transformer/encoder_norm/scale": ("norm.weight", _same),
    "Transformer/encoder_norm/bias": ("norm.bias", _same),
    "head/kernel": ("head.weight", _dense),
    "head/bias": ("head.bias", _same),
    "conv_root/kernel": ("patch_embed.backbone.conv_root.weight", _conv),
    "gn_root/scale": ("patch_embed.backbone.gn_root.weight", _same),
    "gn_root/bias": ("patch_embed.backbone.gn_root.bias", _same),
}


def _vit_rule(name: str, hybrid: bool) -> Rule | None:
    if name in _VIT_TOP:
        ours, fn = _VIT_TOP[name]
        return ours.format(embed="patch_embed.proj" if hybrid else "patch_embed"), fn
    if m := _VIT_BLOCK_RE.fullmatch(name):
        i, rest = m.groups()
        if rest in _VIT_BLOCK:
            ours, fn = _VIT_BLOCK[rest]
            return f"blocks.{int(i)}.{ours}", fn
        return None
    if m := _HYBRID_UNIT_RE.fullmatch(name):
        s, u, layer, param = m.groups()
        if int(s) < 1 or int(u) < 1 or (param == "kernel") != layer.startswith("conv"):
            return None
        ours = "weight" if param == "kernel" else _GN_PARAM[param]
        fn = _conv if param == "kernel" else _same
        return f"patch_embed.backbone.stages.{int(s) - 1}.{int(u) - 1}.{layer}.{ours}", fn
    return None


def vit_from_npz(arrays: Arrays, model: nn.Module) -> StateDict:
    """A vit_jax checkpoint (ViT or R50+ViT hybrid) as a state dict for our VisionTransformer.

    Whether `embedding` is the patch projection or the hybrid's 1x1 projection follows `model`.
    A `pre_logits` representation layer, which our model lacks, is kept under its own name.
    """
    if arrays and all(k.startswith(VIT_PREFIX) for k in arrays):
        arrays = {k[len(VIT_PREFIX):]: v for k, v in arrays.items()}
    hybrid = hasattr(model.patch_embed, "backbone")
    out: StateDict = {}
    qkv: dict[tuple[str, str], dict[str, tuple[str, np.ndarray]]] = {}
    for name, a in arrays.items():
        m = _VIT_BLOCK_RE.fullmatch(name)
        q = _VIT_QKV_RE.fullmatch(m.group(2)) if m else None
        if q:
            qkv.setdefault((m.group(1), q.group(2)), {})[q.group(1)] = (name, a)
            continue
        rule = _vit_rule(name, hybrid)
        ours, fn = rule if rule else (name, _same)
        out[ours] = _tensor(name, fn(a))
    for (i, param), parts in qkv.items():
        if set(parts) != set(_QKV):  # incomplete: report what is there, our qkv key goes missing
            out.update({name: _tensor(name, a) for name, a in parts.values()})
            continue
        shapes = {part: parts[part][1].shape for part in _QKV}
        if len(set(shapes.values())) != 1:
            raise ValueError(f"query, key and value {param}s of encoderblock_{i} differ in shape: {shapes}")
        fn = _attn_in if param == "kernel" else _flat
        out[f"blocks.{int(i)}.attn.qkv.{'weight' if param == 'kernel' else 'bias'}"] = torch.cat(
            [_tensor(parts[p][0], fn(parts[p][1])) for p in _QKV], dim=0)
    return out


_BIT_TOP: dict[str, Rule] = {
    "resnet/root_block/standardized_conv2d/kernel": ("stem.0.weight", _conv),
    "resnet/group_norm/gamma": ("norm.weight", _same),
    "resnet/group_norm/beta": ("norm.bias", _same),
    "resnet/head/conv2d/kernel": ("head.weight", _conv1x1_to_dense),
    "resnet/head/conv2d/bias": ("head.bias", _same),
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
        return f"{unit}.conv{n}.weight", _conv
    if rest in ("group_norm/gamma", "group_norm/beta"):
        return f"{unit}.gn{n}.{'weight' if rest.endswith('gamma') else 'bias'}", _same
    if letter == "a" and rest == "proj/standardized_conv2d/kernel":
        return f"{unit}.downsample.weight", _conv
    return None


def bit_from_npz(arrays: Arrays, model: nn.Module) -> StateDict:
    """A BiT checkpoint (big_transfer's ResNet-v2 .npz) as a state dict for our ResNetV2."""
    out: StateDict = {}
    for name, a in arrays.items():
        rule = _bit_rule(name)
        ours, fn = rule if rule else (name, _same)
        out[ours] = _tensor(name, fn(a))
    return out


def converter_for(model: nn.Module) -> Callable[[Arrays, nn.Module], StateDict] | None:
    """The converter for `model`'s family, or None when no .npz layout is known for it."""
    # Imported here: the converters translate to our built-in plugins' module names.
    from benchbench_plugins.resnetv2 import ResNetV2
    from benchbench_plugins.vit import VisionTransformer

    if isinstance(model, VisionTransformer):
        return vit_from_npz
    if isinstance(model, ResNetV2):
        return bit_from_npz
    return None
