"""The vit_jax checkpoint layout (google-research/vision_transformer: ViT and the R50 hybrids) as our
state dicts: each array name translated to our module name, its axes to PyTorch's order.

A name the layout does not know is kept as it is, so that the loader reports it as unexpected
instead of dropping it; a key of ours the file lacks is reported as missing there too.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from torch import nn

from benchbench.specs import NpzLayout
from benchbench_plugins.models.npz_arrays import Arrays, Rule, StateDict, conv, dense, same, tensor

VIT_PREFIX = "opt/target/"  # some vit_jax checkpoints keep the optimiser's wrapping
_QKV = ("query", "key", "value")  # our qkv Linear is [q; k; v] along its output dim


def _attn_in(a: np.ndarray) -> np.ndarray:
    """Query/key/value kernel (D, H, hd) -> (H*hd, D)."""
    return a.reshape(a.shape[0], -1).T


def _attn_out(a: np.ndarray) -> np.ndarray:
    """Output kernel (H, hd, D) -> (D, H*hd)."""
    return a.reshape(-1, a.shape[-1]).T


def _flat(a: np.ndarray) -> np.ndarray:
    """Query/key/value bias (H, hd) -> (H*hd,)."""
    return a.reshape(-1)


# vit_jax encoder block: name below Transformer/encoderblock_{i}/ -> our name below blocks.{i}.
_VIT_BLOCK: dict[str, Rule] = {
    "LayerNorm_0/scale": ("ln1.weight", same),
    "LayerNorm_0/bias": ("ln1.bias", same),
    "MultiHeadDotProductAttention_1/out/kernel": ("attn.proj.weight", _attn_out),
    "MultiHeadDotProductAttention_1/out/bias": ("attn.proj.bias", same),
    "LayerNorm_2/scale": ("ln2.weight", same),
    "LayerNorm_2/bias": ("ln2.bias", same),
    "MlpBlock_3/Dense_0/kernel": ("mlp.fc1.weight", dense),
    "MlpBlock_3/Dense_0/bias": ("mlp.fc1.bias", same),
    "MlpBlock_3/Dense_1/kernel": ("mlp.fc2.weight", dense),
    "MlpBlock_3/Dense_1/bias": ("mlp.fc2.bias", same),
}
_VIT_BLOCK_RE = re.compile(r"Transformer/encoderblock_(\d+)/(.+)")
_VIT_QKV_RE = re.compile(r"MultiHeadDotProductAttention_1/(query|key|value)/(kernel|bias)")
# vit_jax models_resnet.py, inside the hybrid: block{s+1}/unit{u+1}/{conv,gn}{1,2,3,_proj}.
_HYBRID_UNIT_RE = re.compile(r"block(\d+)/unit(\d+)/(conv[123]|conv_proj|gn[123]|gn_proj)/(kernel|scale|bias)")
_GN_PARAM = {"scale": "weight", "bias": "bias"}
_VIT_TOP: dict[str, Rule] = {
    "embedding/kernel": ("{embed}.weight", conv),
    "embedding/bias": ("{embed}.bias", same),
    "cls": ("cls_token", same),
    "Transformer/posembed_input/pos_embedding": ("pos_embed", same),
    "Transformer/encoder_norm/scale": ("norm.weight", same),
    "Transformer/encoder_norm/bias": ("norm.bias", same),
    "head/kernel": ("head.weight", dense),
    "head/bias": ("head.bias", same),
    "conv_root/kernel": ("patch_embed.backbone.conv_root.weight", conv),
    "gn_root/scale": ("patch_embed.backbone.gn_root.weight", same),
    "gn_root/bias": ("patch_embed.backbone.gn_root.bias", same),
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
        fn = conv if param == "kernel" else same
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
        ours, fn = rule if rule else (name, same)
        out[ours] = tensor(name, fn(a))
    for (i, param), parts in qkv.items():
        if set(parts) != set(_QKV):  # incomplete: report what is there, our qkv key goes missing
            out.update({name: tensor(name, a) for name, a in parts.values()})
            continue
        shapes = {part: parts[part][1].shape for part in _QKV}
        if len(set(shapes.values())) != 1:
            raise ValueError(f"query, key and value {param}s of encoderblock_{i} differ in shape: {shapes}")
        fn = _attn_in if param == "kernel" else _flat
        out[f"blocks.{int(i)}.attn.qkv.{'weight' if param == 'kernel' else 'bias'}"] = torch.cat(
            [tensor(parts[p][0], fn(parts[p][1])) for p in _QKV], dim=0)
    return out


LAYOUT = NpzLayout("vit_jax npz", vit_from_npz)
