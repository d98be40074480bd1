"""R50 + ViT hybrids: structure, parameters and MACs against written-out formulas (the `formulas` fixture
and backbone_macs below). Full-size MAC traces are `slow`; the default run traces the same unit layouts,
narrower, under a smaller ViT at 64 px."""

import pytest
import torch

from benchbench.meters.flops import count_macs
from benchbench.meters.params import count_params
from benchbench_plugins.models import hybrid
from benchbench_plugins.models import vision_transformer as vit


def backbone_macs(units, width, image, in_chans=3, small_root=False):
    if small_root:
        r = (image + 1) // 2
        total = r * r * width * in_chans * 9
    else:
        r = (image + 1) // 2
        total = r * r * width * in_chans * 49
        r = (r + 1) // 2  # SAME max-pool, stride 2
    cin = width
    for i, n in enumerate(units):
        f = width * 2 ** i
        for j in range(n):
            stride = 2 if (i and not j) else 1
            c = cin if j == 0 else 4 * f
            r_out = (r + stride - 1) // stride
            total += r * r * f * c + r_out * r_out * f * f * 9 + r_out * r_out * 4 * f * f
            if j == 0:
                total += r_out * r_out * 4 * f * c
            r = r_out
        cin = 4 * f
    return total, cin


@pytest.mark.parametrize("units,width,stride", [(hybrid.R50_S16, "B", 16), (hybrid.R50_S32, "B", 32),
                                                (hybrid.R50_S16, "L", 16), (hybrid.R50_S32, "L", 32)])
def test_hybrid_params_match_formula(formulas, units, width, stride):
    w = vit.WIDTHS[width]
    with torch.device("meta"):
        model = hybrid.create(units, width)
    bb, channels = formulas.backbone_params(units, 64)
    # A ViT on a (224 / stride)^2 grid whose patch projection is a 1x1 conv on the backbone's channels.
    expected = formulas.vit_params(w.hidden, w.depth, w.mlp, stride, 224, in_chans=3) \
        - (3 * stride * stride * w.hidden) + channels * w.hidden + bb
    assert count_params(model) == expected
    assert model.pos_embed.shape == (1, (224 // stride) ** 2 + 1, w.hidden)


def test_s16_moves_stage4_units_into_stage3():
    assert sum(hybrid.R50_S16) == sum(hybrid.R50_S32)
    assert hybrid.ResNetBackbone(hybrid.R50_S16, 64, 3).stride == 16
    assert hybrid.ResNetBackbone(hybrid.R50_S32, 64, 3).stride == 32


@pytest.mark.parametrize("units,stride,width,resnet_width,image", [
    # R50's unit layouts at a quarter of its channels, under ViT-Ti, at 64 px
    pytest.param(hybrid.R50_S16, 16, "Ti", 16, 64, id="R50_S16-narrow+Ti-64px"),
    pytest.param(hybrid.R50_S32, 32, "Ti", 16, 64, id="R50_S32-narrow+Ti-64px"),
    pytest.param(hybrid.R50_S16, 16, "B", 64, 224, marks=pytest.mark.slow, id="R50_S16+B-224px"),
    pytest.param(hybrid.R50_S32, 32, "B", 64, 224, marks=pytest.mark.slow, id="R50_S32+B-224px"),
])
def test_hybrid_macs_match_formula(formulas, units, stride, width, resnet_width, image):
    groups = 32 if resnet_width == 64 else 8
    model = hybrid.create(units, width, resnet_width=resnet_width, groups=groups, image_size=image)
    bb, channels = backbone_macs(units, resnet_width, image)
    w = vit.WIDTHS[width]
    grid = image // stride
    expected = bb + formulas.vit_macs(w.hidden, w.depth, w.mlp, stride, image) \
        - grid * grid * w.hidden * 3 * stride * stride + grid * grid * w.hidden * channels
    count = count_macs(model, image)
    assert count.macs == expected and count.status == "ok"


def test_small_hybrid_forward_and_macs(formulas):
    model = hybrid.create(hybrid.SMALL_UNITS, "Mu", resnet_width=16, small_root=True, groups=8, num_classes=10,
                          image_size=28, in_chans=1)
    assert model.grid == 7 and model.patch_embed.backbone.stride == 4
    with torch.no_grad():
        assert model.eval()(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    bb, channels = backbone_macs(hybrid.SMALL_UNITS, 16, 28, in_chans=1, small_root=True)
    expected = bb + formulas.vit_macs(64, 6, 128, 4, 28, in_chans=1, classes=10) - 49 * 64 * 16 + 49 * 64 * channels
    assert count_macs(model, 28, in_chans=1).macs == expected


def test_same_padding_matches_tensorflow_rule():
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    # k=3, s=2 on 4: output 2, total padding 1, all of it after (TF "SAME").
    assert hybrid.pad_same(x, 3, 2).shape == (1, 1, 5, 5)
    assert torch.equal(hybrid.pad_same(x, 3, 2)[..., :4, :4], x)
    assert hybrid.pad_same(x, 3, 1).shape == (1, 1, 6, 6)  # stride 1: symmetric


def test_last_norm_of_each_unit_starts_at_zero():
    unit = hybrid.ResidualUnit(64, 16, 1, groups=8)
    assert torch.count_nonzero(unit.gn3.weight) == 0
    x = torch.randn(1, 64, 5, 5).abs()
    torch.testing.assert_close(unit(x), torch.relu(x))  # identity shortcut, zero residual branch
