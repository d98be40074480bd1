"""timm's BiT layout (timm.models.resnetv2, the `resnetv2_*_bit` models: ResNet-v2 with GroupNorm and
weight standardisation, BiT's fixed-padding stem) as our ResNetV2's; and the Hugging Face transformers
BiT layout (`google/bit-*`), recognised and refused.

timm's other ResNet-v2 models (BatchNorm, deep stems, basic blocks, EvoNorm/FRN) are refused naming
what ours lacks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from benchbench.specs import StateDictLayout

StateDict = Mapping[str, torch.Tensor]

_TOP = {"stem.conv.weight": "stem.0.weight", "norm.weight": "norm.weight", "norm.bias": "norm.bias",
        "head.fc.bias": "head.bias"}
_UNIT_RE = re.compile(r"stages\.(\d+)\.blocks\.(\d+)\.(conv[123]\.weight|norm[123]\.(?:weight|bias)|downsample\.conv\.weight)")
_FEATURES = (
    (r".*running_(mean|var)", "BatchNorm (ours is GroupNorm with weight standardisation)"),
    (r"stem\.conv[123]\..*", "a deep stem of three 3x3 convs (the 'd' variants)"),
    (r".*\.(v|tau)", "EvoNorm or filter response normalisation"),
    (r"stages\.\d+\.blocks\.\d+\.downsample\.norm\..*", "post-activation units (a normalised shortcut)"),
)


def detect(sd: StateDict) -> bool:
    """timm's ResNet-v2 names: `stem.conv` (or a deep stem) and `stages.S.blocks.U`."""
    return any(k.startswith("stages.0.blocks.") for k in sd) and any(k.startswith("stem.conv") for k in sd)


def unsupported(sd: StateDict, config: Mapping[str, Any]) -> list[str]:
    found = [feature for pattern, feature in _FEATURES if any(re.fullmatch(pattern, k) for k in sd)]
    units = {m.group(1, 2) for k in sd if (m := _UNIT_RE.fullmatch(k))}
    if units and not any(k.endswith(".conv3.weight") for k in sd if k.startswith("stages.")):
        found.append("basic blocks of two 3x3 convs (resnetv2_18/34); ours are bottlenecks")
    arch = config.get("architecture")
    if isinstance(arch, str) and not found and not re.fullmatch(r"resnetv2_\d+x\d+_bit", arch):
        found.append(f"architecture {arch!r}: timm's BiT models are resnetv2_<depth>x<width>_bit")
    return found


def _rename(name: str) -> str:
    if name in _TOP:
        return _TOP[name]
    if m := _UNIT_RE.fullmatch(name):
        s, u, tail = m.groups()
        tail = tail.replace("downsample.conv.weight", "downsample.weight").replace("norm", "gn")
        return f"stages.{int(s)}.{int(u)}.{tail}"
    return name


def bit_from_timm(sd: StateDict, model: nn.Module, config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A timm `resnetv2_*_bit` state dict as one for our ResNetV2; its 1x1-conv head as our Linear."""
    features = unsupported(sd, config)
    if features:
        raise ValueError("this timm ResNet-v2 has what benchbench's BiT lacks: " + "; ".join(features)
                         + ". timm's resnetv2_<depth>x<width>_bit models load")
    out = {_rename(k): v for k, v in sd.items() if k != "head.fc.weight"}
    head = sd.get("head.fc.weight")
    if head is not None:
        out["head.weight"] = head.flatten(1) if head.ndim == 4 and head.shape[2:] == (1, 1) else head
    return out


LAYOUT = StateDictLayout("timm bit", detect, bit_from_timm)


def detect_transformers(sd: StateDict) -> bool:
    """transformers' BitModel / BitForImageClassification names (`bit.embedder`, `bit.encoder.stages`)."""
    return any(re.match(r"(bit\.)?(embedder\.convolution|encoder\.stages\.\d+\.layers)\.", k) for k in sd)


def refuse_transformers(sd: StateDict, model: nn.Module, config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    raise ValueError(
        "its keys are in the Hugging Face transformers BiT layout (google/bit-*: bit.embedder..., "
        "bit.encoder.stages.N.layers...), which benchbench does not read; use timm's BiT weights of the same "
        "models instead, e.g. hf-hub:timm/resnetv2_50x1_bit.goog_in21k_ft_in1k (timm's resnetv2_*_bit)")


TRANSFORMERS_LAYOUT = StateDictLayout("transformers bit", detect_transformers, refuse_transformers)
