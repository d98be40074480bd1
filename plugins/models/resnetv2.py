"""BiT ResNet-v2 (Kolesnikov et al. 2019, "Big Transfer"), the paper's CNN baseline.

Pre-activation bottleneck blocks (He et al. 2016), group normalisation (32 groups) and weight
standardisation on every convolution, the stride in the 3x3 conv, a projection shortcut taken
from the pre-activated input. Layout and naming follow the BiT PyTorch release.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from benchbench import hookimpl
from benchbench.specs import ModelSpec
from benchbench_plugins.models import bit_timm
from benchbench_plugins.models.bit_npz import LAYOUT


WS_EPS = 1e-10  # BiT's: added to the variance inside the square root (timm's StdConv2d uses 1e-8)


def standardise(weight: torch.Tensor) -> torch.Tensor:
    """(w - mean) / sqrt(var + 1e-10) over each output filter, the variance biased.

    One group_norm call with a group per filter, the weight seen as (1, out_channels, fan_in): the
    same function as var_mean, subtract and divide, in one fused kernel forward and one backward
    (benchmarks/stdconv_speed.py: faster than that and than timm's batch_norm form on the CPU;
    docs/compute.md). GroupNorm carries no multiply-accumulates, so FLOP counts are unchanged."""
    out_channels = weight.shape[0]
    return F.group_norm(weight.reshape(1, out_channels, -1), out_channels, eps=WS_EPS).reshape_as(weight)


class StdConv2d(nn.Conv2d):
    """Conv2d with weight standardisation: zero mean, unit variance per output filter."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, standardise(self.weight), self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


def conv3x3(cin: int, cout: int, stride: int = 1) -> StdConv2d:
    return StdConv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> StdConv2d:
    return StdConv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class PreActBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, cmid: int, stride: int, groups: int):
        super().__init__()
        self.gn1 = nn.GroupNorm(groups, cin)
        self.conv1 = conv1x1(cin, cmid)
        self.gn2 = nn.GroupNorm(groups, cmid)
        self.conv2 = conv3x3(cmid, cmid, stride)
        self.gn3 = nn.GroupNorm(groups, cmid)
        self.conv3 = conv1x1(cmid, cout)
        self.downsample = conv1x1(cin, cout, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.gn1(x))
        residual = x if self.downsample is None else self.downsample(out)
        out = self.conv1(out)
        out = self.conv2(F.relu(self.gn2(out)))
        out = self.conv3(F.relu(self.gn3(out)))
        return out + residual


@dataclass(frozen=True)
class Depth:
    """Bottleneck units per stage; depth = 3 * units + 2 (stem conv and head)."""

    name: str
    units: tuple[int, ...]


DEPTHS = {
    d.name: d
    for d in (
        Depth("R50", (3, 4, 6, 3)),
        Depth("R101", (3, 4, 23, 3)),
        Depth("R152", (3, 8, 36, 3)),
        Depth("R200", (3, 24, 36, 3)),
        Depth("R20", (2, 2, 2)),  # small: three stages for 28-64 px inputs
    )
}


class ResNetV2(nn.Module):
    """BiT ResNet-v2. `stem="bit"`: 7x7/2 conv + 3x3/2 max-pool (224 px); `stem="small"`: one 3x3
    conv of stride `stem_stride` (28-64 px).

    Stage i has `4 * base_width * 2**i` output channels and a bottleneck of `base_width * 2**i`;
    the BiT models use `base_width = 64 * width_factor`.
    """

    def __init__(
        self,
        units: tuple[int, ...],
        width_factor: int = 1,
        *,
        base_width: int = 64,
        stem: str = "bit",
        stem_stride: int = 2,
        groups: int = 32,
        num_classes: int = 1000,
        image_size: int = 224,
        in_chans: int = 3,
    ):
        super().__init__()
        base = base_width * width_factor
        self.units, self.base_width, self.stem_type, self.image_size = tuple(units), base, stem, image_size
        if stem == "bit":
            self.stem = nn.Sequential(
                StdConv2d(in_chans, base, kernel_size=7, stride=2, padding=3, bias=False),
                nn.ConstantPad2d(1, 0.0),
                nn.MaxPool2d(kernel_size=3, stride=2),
            )
        elif stem == "small":
            self.stem = nn.Sequential(conv3x3(in_chans, base, stride=stem_stride))
        else:
            raise ValueError(f"unknown stem {stem!r}; allowed: 'bit', 'small'")
        stages, cin = [], base
        for i, n in enumerate(units):
            cmid, cout = base * 2**i, 4 * base * 2**i
            blocks = [PreActBottleneck(cin if j == 0 else cout, cout, cmid, 2 if (i and not j) else 1, groups)
                      for j in range(n)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.num_features = cin
        self.norm = nn.GroupNorm(groups, cin)
        self.head = nn.Linear(cin, num_classes)  # the BiT release's 1x1 conv on pooled features
        self.reset_head(num_classes)

    def reset_head(self, num_classes: int) -> None:
        """A fresh zero-initialised head, as BiT does for transfer."""
        self.head = nn.Linear(self.num_features, num_classes, device=self.norm.weight.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-logits representation: global average pool of the final pre-activation."""
        x = F.relu(self.norm(self.stages(self.stem(x))))
        return x.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def create(depth: str, width_factor: int, **kwargs) -> ResNetV2:
    return ResNetV2(DEPTHS[depth].units, width_factor, **kwargs)


BIT_VARIANTS = (("R50", 1), ("R50", 2), ("R50", 3), ("R101", 1), ("R101", 3),
                ("R152", 1), ("R152", 2), ("R152", 4), ("R200", 3))
SMALL_BASE_WIDTH, SMALL_GROUPS, SMALL_RESOLUTION = 16, 8, 28
# Measured on an H100 (results/h100: BiT-R50x1, bf16, batch 256, benchbench's own training step): eager
# 1976 img/s, 4.9 % of the 989.5 TFLOP/s datasheet peak; compiled 4612 img/s, a step 0.57 shorter.
STYLE = dict(npz_layout=LAYOUT, state_dict_layouts=(bit_timm.LAYOUT, bit_timm.TRANSFORMERS_LAYOUT), marker="s",
             color="tab:orange", eager_mfu=0.049, compile_gain=1 - 1976 / 4612,
             projection_family="resnetv2-bit")


@hookimpl
def register_models(register) -> None:
    for depth, wf in BIT_VARIANTS:
        d = DEPTHS[depth]
        register(ModelSpec(
            id=f"bit-{depth.lower()}x{wf}",
            name=f"BiT-{depth}x{wf}",
            family="bit",
            build=partial(create, depth, wf),
            default_resolution=224,
            aliases=(f"ResNet{depth[1:]}x{wf}",) + (("BiT-L",) if (depth, wf) == ("R152", 4) else ()),
            description=f"ResNet-v2 {depth} (units {d.units}), width x{wf}, GN + WS",
            **STYLE,
        ))
    register(ModelSpec(
        id="bit-r20x1-small",
        name="BiT-R20x1 (28px)",
        family="bit",
        build=partial(create, "R20", 1, base_width=SMALL_BASE_WIDTH, stem="small", groups=SMALL_GROUPS),
        default_resolution=SMALL_RESOLUTION,
        description=f"ResNet-v2 R20 (units {DEPTHS['R20'].units}), base width {SMALL_BASE_WIDTH}, "
                    f"3x3/1 stem, GN({SMALL_GROUPS}) + WS, for 28-64 px",
        **STYLE,
    ))
