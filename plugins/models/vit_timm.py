"""timm's ViT state-dict layout (timm.models.vision_transformer, and the R50 hybrids of
vision_transformer_hybrid) as our VisionTransformer's: names translated, tensors unchanged (timm's
fused qkv is ours, [q; k; v] along the output dimension).

Only the ViTs the paper's architecture represents load: a class token pooled for the head, learned 1-D
position embeddings that include the class token's, pre-LN blocks of attention and an exact-GELU MLP
with biases, a final LayerNorm, a patch conv. A timm ViT with anything else (register tokens, RoPE,
layer scale, average or attention pooling, fc_norm, qk_norm, a pre-norm, gated MLPs, ...) is refused
naming what our ViT lacks, read from its tensors and, where the file has one, its config.json (some
features leave no tensor: an activation, average pooling without fc_norm).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from benchbench.specs import StateDictLayout

StateDict = Mapping[str, torch.Tensor]

# timm's name below blocks.{i}. -> ours.
_BLOCK = {"norm1.weight": "ln1.weight", "norm1.bias": "ln1.bias", "attn.qkv.weight": "attn.qkv.weight",
          "attn.qkv.bias": "attn.qkv.bias", "attn.proj.weight": "attn.proj.weight", "attn.proj.bias": "attn.proj.bias",
          "norm2.weight": "ln2.weight", "norm2.bias": "ln2.bias", "mlp.fc1.weight": "mlp.fc1.weight",
          "mlp.fc1.bias": "mlp.fc1.bias", "mlp.fc2.weight": "mlp.fc2.weight", "mlp.fc2.bias": "mlp.fc2.bias"}
_TOP = {"cls_token": "cls_token", "pos_embed": "pos_embed", "norm.weight": "norm.weight", "norm.bias": "norm.bias",
        "head.weight": "head.weight", "head.bias": "head.bias"}
_BLOCK_RE = re.compile(r"blocks\.(\d+)\.(.+)")
# timm's ResNetV2 (preact=False, stem "same") inside the hybrid's patch embedding -> our ResNetBackbone.
BACKBONE = "patch_embed.backbone."
_STEM = {"stem.conv.weight": "conv_root.weight", "stem.norm.weight": "gn_root.weight", "stem.norm.bias": "gn_root.bias"}
_UNIT_RE = re.compile(r"stages\.(\d+)\.blocks\.(\d+)\.(conv[123]\.weight|norm[123]\.(?:weight|bias)|"
                      r"downsample\.conv\.weight|downsample\.norm\.(?:weight|bias))")

# Tensors that name a feature our ViT lacks: (pattern, the feature).
_FEATURE_TENSORS = (
    (r"reg_token", "register tokens (reg_token)"),
    (r"dist_token", "a distillation token (DeiT's dist_token)"),
    (r"blocks\.\d+\.ls[12]\.(gamma|weight)", "layer scale (blocks.N.ls1/ls2)"),
    (r"blocks\.\d+\.attn\.[qk]_norm\..*", "query-key normalisation (qk_norm)"),
    (r"blocks\.\d+\.attn\.norm\..*", "a norm inside attention (scale_attn_norm)"),
    (r"blocks\.\d+\.mlp\.norm\..*", "a norm inside the MLP (scale_mlp_norm)"),
    (r"blocks\.\d+\.mlp\.fc1_[gx]\..*", "a gated MLP (SwiGLU)"),
    (r"blocks\.\d+\.attn\.[qv]_bias", "separate q/v biases (BEiT-style attention)"),
    (r"blocks\.\d+\.(in_proj|in_norm|attns|ffns)\..*", "parallel attention and MLP blocks"),
    (r"blocks\.\d+\.attn\.(lambda_.*|sub_norm\..*)", "differential attention"),
    (r"norm_pre\..*", "a norm before the blocks (pre_norm, as CLIP)"),
    (r"fc_norm\..*", "a norm after pooling (fc_norm, with average pooling)"),
    (r"attn_pool\..*", "attention pooling (a MAP head)"),
    (r"patch_embed\.norm\..*", "a norm in the patch embedding"),
    (r"rope\..*|.*\.rope\..*", "rotary position embeddings (RoPE)"),
    (r"head_dist\..*", "a distillation head (DeiT's head_dist)"),
)
# Features a state dict does not show, known from the architecture's name (timm's model definitions).
_FEATURE_NAMES = (
    (r".*quickgelu.*", "the QuickGELU activation (OpenAI CLIP); ours is the exact GELU"),
    (r".*_gap_.*|.*_gap$", "average pooling over the patch tokens (global_pool 'avg'); ours pools the class token"),
    (r".*_rpn_.*", "post-norm residual blocks (ResPostBlock)"),
    (r".*_siglip_.*", "SigLIP's pooling and activation"),
    (r".*_clip_.*", "CLIP's pre-norm and LayerNorm epsilon"),
)
_ACTIVATIONS = ("gelu", None)  # timm model_args act_layer values that are the exact GELU


def detect(sd: StateDict) -> bool:
    """timm's ViT names: a `patch_embed.proj` projection and none of our block names (`ln1`)."""
    return "patch_embed.proj.weight" in sd and not any(".ln1." in k for k in sd) \
        and not any(k.startswith(BACKBONE + "conv_root") for k in sd)


def unsupported(sd: StateDict, config: Mapping[str, Any]) -> list[str]:
    """What a timm ViT has that the paper's architecture (ours) lacks: from its tensors and its config."""
    found: list[str] = []

    def add(feature: str) -> None:
        if feature not in found:
            found.append(feature)

    for pattern, feature in _FEATURE_TENSORS:
        if any(re.fullmatch(pattern, k) for k in sd):
            add(feature)
    if "cls_token" not in sd:
        add("no class token (class_token=False: the head pools the patch tokens)")
    pos = sd.get("pos_embed")
    if pos is None:
        add("no learned position embeddings (RoPE or none)")
    elif pos.ndim != 3 or pos.shape[1] < 2:
        add(f"position embeddings of shape {list(pos.shape)}: none for the patches (ours: the class token's, "
            "then one per patch)")
    elif math.isqrt(pos.shape[1]) ** 2 == pos.shape[1]:
        add("position embeddings without the class token's (no_embed_class)")
    blocks = sorted({int(m.group(1)) for k in sd if (m := _BLOCK_RE.fullmatch(k))})
    for i in blocks[:1]:
        for name, feature in (("attn.qkv.bias", "qkv without bias (qkv_bias=False)"),
                              ("attn.proj.bias", "attention projection without bias"),
                              ("norm1.bias", "norms without bias (RMSNorm)")):
            if f"blocks.{i}.{name}" not in sd and f"blocks.{i}.{name.replace('bias', 'weight')}" in sd:
                add(feature)
    if "patch_embed.proj.bias" not in sd and not any(k.startswith(BACKBONE) for k in sd):
        add("a patch embedding without bias")
    if "norm.weight" not in sd and "fc_norm.weight" not in sd:
        add("no final norm")
    arch = config.get("architecture")
    pool = config.get("global_pool")
    if isinstance(pool, str) and pool not in ("token", ""):
        add(f"global_pool {pool!r} (ours pools the class token)")
    args = config.get("model_args") if isinstance(config.get("model_args"), Mapping) else {}
    if args.get("act_layer") not in _ACTIVATIONS:
        add(f"activation {args.get('act_layer')!r} (ours is the exact GELU)")
    if isinstance(arch, str):
        for pattern, feature in _FEATURE_NAMES:
            if re.fullmatch(pattern, arch):
                add(feature)
    return found


def _rename(name: str, hybrid: bool) -> str:
    if name in _TOP:
        return _TOP[name]
    if m := _BLOCK_RE.fullmatch(name):
        i, rest = m.groups()
        return f"blocks.{int(i)}.{_BLOCK[rest]}" if rest in _BLOCK else name
    if name.startswith("patch_embed.proj."):
        return name if hybrid else "patch_embed." + name.removeprefix("patch_embed.proj.")
    if hybrid and name.startswith(BACKBONE):
        rest = name.removeprefix(BACKBONE)
        if rest in _STEM:
            return BACKBONE + _STEM[rest]
        if m := _UNIT_RE.fullmatch(rest):
            s, u, tail = m.groups()
            tail = (tail.replace("downsample.conv", "conv_proj").replace("downsample.norm", "gn_proj")
                    .replace("norm", "gn"))
            return f"{BACKBONE}stages.{int(s)}.{int(u)}.{tail}"
    return name


def vit_from_timm(sd: StateDict, model: nn.Module, config: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A timm ViT (or R50 hybrid) state dict as one for our VisionTransformer; ValueError naming the
    features ours lacks. Whether the patch embedding is a hybrid's follows `model`."""
    features = unsupported(sd, config)
    if features:
        arch = config.get("architecture")
        named = f"timm's {arch}" if isinstance(arch, str) else "this timm ViT"
        raise ValueError(f"{named} has what benchbench's ViT (the paper's architecture) lacks: "
                         + "; ".join(features) + ". Only ViTs with a class token, learned 1-D position "
                         "embeddings, pre-LN blocks with an exact-GELU MLP and a patch conv load")
    hybrid = hasattr(model.patch_embed, "backbone")
    return {_rename(k, hybrid): v for k, v in sd.items()}


LAYOUT = StateDictLayout("timm vit", detect, vit_from_timm)
