"""The Hugging Face transformers ViT layout (`google/vit-*`: ViTModel, ViTForImageClassification) as our
VisionTransformer's: names translated, query/key/value fused into our qkv ([q; k; v] rows).

transformers' ViT is the paper's architecture; its LayerNorm epsilon (1e-12 in google/vit-* configs)
differs from the paper's 1e-6 (ours), which moves logits by a relative ~1e-6. Other model types in that
layout (DeiT, DINOv2, ...) or another activation are refused naming what ours lacks. transformers'
pooler (a dense + tanh on the class token: the in21k checkpoints' pre-logits layer) becomes
`pre_logits.*`, which the loader drops with the head or reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from benchbench.specs import StateDictLayout

StateDict = Mapping[str, torch.Tensor]

_PREFIX = "vit."
_TOP = {"embeddings.cls_token": "cls_token", "embeddings.position_embeddings": "pos_embed",
        "embeddings.patch_embeddings.projection.weight": "patch_embed.weight",
        "embeddings.patch_embeddings.projection.bias": "patch_embed.bias",
        "layernorm.weight": "norm.weight", "layernorm.bias": "norm.bias",
        "pooler.dense.weight": "pre_logits.weight", "pooler.dense.bias": "pre_logits.bias"}
_HEAD = {"classifier.weight": "head.weight", "classifier.bias": "head.bias"}
_LAYER_RE = re.compile(r"encoder\.layer\.(\d+)\.(.+)")
_LAYER = {"layernorm_before": "ln1", "layernorm_after": "ln2", "attention.output.dense": "attn.proj",
          "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
_QKV_RE = re.compile(r"attention\.attention\.(query|key|value)\.(weight|bias)")
_QKV = ("query", "key", "value")


def detect(sd: StateDict) -> bool:
    """transformers' ViT names: `[vit.]embeddings.patch_embeddings.projection` or `[vit.]encoder.layer.N`."""
    return any(re.match(r"(vit\.)?(embeddings\.patch_embeddings\.projection|encoder\.layer\.\d+\.attention)\.", k)
               for k in sd)


def unsupported(sd: StateDict, config: Mapping[str, Any]) -> list[str]:
    found = []
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type != "vit":
        found.append(f"model_type {model_type!r} (transformers' {model_type}, not its ViT)")
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        found.append(f"activation {act!r} (ours is the exact GELU)")
    if config.get("qkv_bias") is False:
        found.append("qkv without bias")
    if any(k.endswith("embeddings.distillation_token") for k in sd):
        found.append("a distillation token (DeiT)")
    if any(".layer_scale" in k or k.endswith(".lambda1") for k in sd):
        found.append("layer scale")
    return found


def vit_from_transformers(sd: StateDict, model: nn.Module, config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A transformers ViT state dict as one for our (plain) VisionTransformer."""
    features = unsupported(sd, config)
    if features:
        raise ValueError("this checkpoint in the Hugging Face transformers layout has what benchbench's ViT lacks: "
                         + "; ".join(features))
    if hasattr(model.patch_embed, "backbone"):
        raise ValueError("transformers' ViT layout holds a plain ViT, not a hybrid (its ViT-hybrid models are "
                         "not read); load it into a vit-* model")
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for name, t in sd.items():
        if name in _HEAD:
            out[_HEAD[name]] = t
            continue
        short = name.removeprefix(_PREFIX)
        m = _LAYER_RE.fullmatch(short)
        if m and (q := _QKV_RE.fullmatch(m.group(2))):
            qkv.setdefault((int(m.group(1)), q.group(2)), {})[q.group(1)] = (name, t)
        elif short in _TOP:
            out[_TOP[short]] = t
        elif m and (layer := _LAYER.get(m.group(2).rsplit(".", 1)[0])):
            out[f"blocks.{int(m.group(1))}.{layer}.{m.group(2).rsplit('.', 1)[1]}"] = t
        else:
            out[name] = t  # reported as unexpected
    for (i, param), parts in qkv.items():
        if set(parts) != set(_QKV):  # incomplete: reported as they are, our qkv goes missing
            out.update(dict(parts.values()))
            continue
        out[f"blocks.{i}.attn.qkv.{param}"] = torch.cat([parts[p][1] for p in _QKV], dim=0)
    return out


LAYOUT = StateDictLayout("transformers vit", detect, vit_from_transformers)
