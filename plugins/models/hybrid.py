"""Hybrid ResNet + ViT (the paper's Section 3.1, "Hybrid Architecture").

A ResNet's feature map is projected with patch size 1 into ViT tokens. As the paper: for the /32
hybrids the output of stage 4 of a regular ResNet-50 (units 3, 4, 6, 3); for the /16 hybrids stage 4
is removed and its units are put into stage 3 (units 3, 4, 9: same number of layers), giving a 4x
longer sequence. The backbone follows the paper's code release (vit_jax/models_resnet.py):
post-activation bottlenecks with GroupNorm and weight-standardised convolutions, TF "SAME"
padding, the last GroupNorm of each unit initialised to zero.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from benchbench import hookimpl
from benchbench.specs import ModelSpec
from benchbench_plugins.models.vision_transformer import WIDTHS, VisionTransformer
from benchbench_plugins.models import vit_timm
from benchbench_plugins.models.vit_npz import LAYOUT


def _same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """TF/Flax "SAME" padding: output = ceil(input / stride), extra padding after."""
    top, bottom = _same_pads(x.shape[-2], kernel, stride)
    left, right = _same_pads(x.shape[-1], kernel, stride)
    if top == bottom == left == right == 0:
        return x
    return F.pad(x, (left, right, top, bottom), value=value)


class StdConvSame(nn.Conv2d):
    """Weight-standardised conv, (w - mean) / (std + 1e-5) as the Flax code, with SAME padding."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1):
        super().__init__(cin, cout, kernel, stride=stride, padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / (w.std(dim=(1, 2, 3), keepdim=True, unbiased=False) + 1e-5)
        return F.conv2d(pad_same(x, self.kernel_size[0], self.stride[0]), w, None, self.stride)


def group_norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(groups, channels, eps=1e-6)  # Flax's default epsilon


class ResidualUnit(nn.Module):
    """Post-activation bottleneck: relu(shortcut + GN(conv1x1(relu(GN(conv3x3(relu(GN(conv1x1(x)))))))))."""

    def __init__(self, cin: int, features: int, stride: int, groups: int):
        super().__init__()
        cout = 4 * features
        self.conv1, self.gn1 = StdConvSame(cin, features, 1), group_norm(features, groups)
        self.conv2, self.gn2 = StdConvSame(features, features, 3, stride), group_norm(features, groups)
        self.conv3, self.gn3 = StdConvSame(features, cout, 1), group_norm(cout, groups)
        nn.init.zeros_(self.gn3.weight)
        self.projection = cin != cout or stride != 1
        if self.projection:
            self.conv_proj, self.gn_proj = StdConvSame(cin, cout, 1, stride), group_norm(cout, groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.gn_proj(self.conv_proj(x)) if self.projection else x
        y = F.relu(self.gn1(self.conv1(x)))
        y = F.relu(self.gn2(self.conv2(y)))
        return F.relu(residual + self.gn3(self.conv3(y)))


class ResNetBackbone(nn.Module):
    """Root (7x7/2 conv, GN, ReLU, 3x3/2 max-pool; or one 3x3 conv of stride `root_stride` for small
    images) and stages of ResidualUnits; stage i has bottleneck width `width * 2**i`."""

    def __init__(self, units: tuple[int, ...], width: int, in_chans: int, *, small_root: bool = False,
                 root_stride: int = 2, groups: int = 32):
        super().__init__()
        self.units, self.width, self.small_root = tuple(units), width, small_root
        self.conv_root = StdConvSame(in_chans, width, 3 if small_root else 7, root_stride if small_root else 2)
        self.gn_root = group_norm(width, groups)
        stages, cin = [], width
        for i, n in enumerate(units):
            features = width * 2**i
            stages.append(nn.Sequential(*(
                ResidualUnit(cin if j == 0 else 4 * features, features, 2 if (i and not j) else 1, groups)
                for j in range(n))))
            cin = 4 * features
        self.stages = nn.Sequential(*stages)
        self.out_channels = cin
        self.stride = (root_stride if small_root else 4) * 2 ** (len(units) - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.gn_root(self.conv_root(x)))
        if not self.small_root:
            x = F.max_pool2d(pad_same(x, 3, 2, value=float("-inf")), 3, 2)
        return self.stages(x)


class HybridEmbed(nn.Module):
    """The ResNet feature map, projected with patch size 1 (a 1x1 conv) to the ViT's hidden size."""

    def __init__(self, backbone: ResNetBackbone, hidden: int):
        super().__init__()
        self.backbone = backbone
        self.proj = nn.Conv2d(backbone.out_channels, hidden, kernel_size=1)
        fan_in = backbone.out_channels
        nn.init.trunc_normal_(self.proj.weight, std=math.sqrt(1.0 / fan_in))
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.backbone(x))


def create(units: tuple[int, ...], width: str, *, resnet_width: int = 64, small_root: bool = False,
           groups: int = 32, num_classes: int = 1000, image_size: int = 224, in_chans: int = 3,
           dropout: float = 0.0) -> VisionTransformer:
    """A ViT whose patch embedding is a ResNet; its token grid is image_size / backbone stride."""
    backbone = ResNetBackbone(units, resnet_width, in_chans, small_root=small_root, groups=groups)
    model = VisionTransformer(WIDTHS[width], backbone.stride, num_classes=num_classes, image_size=image_size,
                              in_chans=in_chans, dropout=dropout)
    model.patch_embed = HybridEmbed(backbone, WIDTHS[width].hidden)
    return model


R50_S32, R50_S16 = (3, 4, 6, 3), (3, 4, 9)  # /16: stage 4's 3 units moved into stage 3
SMALL_UNITS = (1, 1)  # 28 px: 3x3/2 root, then stride 1 and 2: a 7x7 token grid
STYLE = dict(npz_layout=LAYOUT, state_dict_layouts=(vit_timm.LAYOUT,), marker="^", color="tab:green")


@hookimpl
def register_models(register) -> None:
    for width in ("B", "L"):
        for units, stride in ((R50_S32, 32), (R50_S16, 16)):
            name = f"R50x1+ViT-{width}/{stride}"
            register(ModelSpec(
                id=f"r50x1+vit-{width.lower()}{stride}",
                name=name,
                family="hybrid",
                build=partial(create, units, width),
                default_resolution=224,
                aliases=(name,),
                resolution_multiple=stride,
                description=f"ResNet-50 units {units} (output stride {stride}) + ViT-{width}, patch 1 on its features",
                **STYLE,
            ))
    register(ModelSpec(
        id="r8x1-small+vit-mu4",
        name="R8x1+ViT-Mu/4 (28px)",
        family="hybrid",
        build=partial(create, SMALL_UNITS, "Mu", resnet_width=16, small_root=True, groups=8),
        default_resolution=28,
        resolution_multiple=4,
        description="3x3/2 root + units (1, 1) of width 16 (output stride 4) + ViT-Mu, for 28-64 px",
        **STYLE,
    ))
