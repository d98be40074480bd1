"""Model structure, output shapes and parameter counts against the families' formulas (the `formulas`
fixture, tests/conftest.py)."""

import pytest
import torch

from benchbench.meters.params import count_params
from benchbench_plugins.models import resnetv2
from benchbench_plugins.models import vision_transformer as vit


@pytest.mark.parametrize("width,patch", [("B", 16), ("B", 32), ("L", 16), ("H", 14), ("Ti", 16), ("S", 32)])
def test_vit_params_match_formula(formulas, width, patch):
    w = vit.WIDTHS[width]
    with torch.device("meta"):
        model = vit.create(width, patch)
    assert count_params(model) == formulas.vit_params(w.hidden, w.depth, w.mlp, patch, 224)


def test_vit_params_match_the_paper_table1():
    with torch.device("meta"):
        b16, h14 = vit.create("B", 16), vit.create("H", 14)
    assert round(count_params(b16) / 1e6) == 87  # paper: 86M (86.6M with the 1000-way head)
    assert count_params(b16) - 769_000 == pytest.approx(86e6, rel=0.01)  # without the head
    assert count_params(h14) / 1e6 == pytest.approx(632, rel=0.002)


def test_vit_structure_is_the_papers():
    model = vit.create("Mu", 7, image_size=28, in_chans=1, num_classes=10)
    assert model.patch_embed.kernel_size == (7, 7) and model.patch_embed.stride == (7, 7)
    assert model.pos_embed.shape == (1, 16 + 1, 64)
    assert torch.count_nonzero(model.cls_token) == 0
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    assert len(model.blocks) == 6 and isinstance(model.blocks[0].ln1, torch.nn.LayerNorm)


def test_vit_block_is_pre_ln_with_residuals():
    torch.manual_seed(0)
    block = vit.Block(16, 4, 32, dropout=0.0).eval()
    x = torch.randn(2, 5, 16)
    h = x + block.attn(block.ln1(x))
    expect = h + block.mlp(block.ln2(h))
    torch.testing.assert_close(block(x), expect)


def test_vit_attention_matches_explicit_softmax():
    torch.manual_seed(0)
    attn = vit.Attention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    q, k, v = attn.qkv(x).reshape(2, 7, 3, 4, 8).permute(2, 0, 3, 1, 4)
    a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v
    torch.testing.assert_close(attn(x), attn.proj(a.transpose(1, 2).reshape(2, 7, 32)))


def test_vit_rejects_resolution_not_divisible_by_patch():
    with pytest.raises(ValueError, match="not divisible by patch size 16"):
        vit.create("Ti", 16, image_size=28)


def test_bit_r152x4_trunk_matches_the_bit_paper():
    with torch.device("meta"):
        model = resnetv2.create("R152", 4)
    trunk = count_params(model) - count_params(model.head)
    assert trunk / 1e6 == pytest.approx(928, rel=0.01)  # BiT paper: "928M parameters" for BiT-L


@pytest.mark.parametrize("depth,wf", [("R50", 1), ("R101", 3), ("R152", 2), ("R200", 3)])
def test_bit_params_match_formula(formulas, depth, wf):
    with torch.device("meta"):
        model = resnetv2.create(depth, wf)
    assert count_params(model) == formulas.bit_params(resnetv2.DEPTHS[depth].units, 64 * wf)


def test_bit_uses_weight_standardisation_and_group_norm():
    model = resnetv2.create("R20", 1, base_width=16, stem="small", groups=8, image_size=28, in_chans=1)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(isinstance(c, resnetv2.StdConv2d) for c in convs)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    conv = resnetv2.StdConv2d(3, 4, 3, bias=False)
    x = torch.randn(1, 3, 8, 8)
    w = conv.weight
    w_std = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / w.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
    torch.testing.assert_close(conv(x), torch.nn.functional.conv2d(x, w_std), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_id", ["vit-mu4", "vit-mu7", "bit-r20x1-small"])
def test_small_variants_forward_shapes(catalog, model_id):
    spec = catalog.models.get(model_id)
    model = spec.build(num_classes=10, image_size=28, in_chans=1).eval()
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        assert model(x).shape == (3, 10)
        feats = model.features(x)
    assert feats.ndim == 2 and feats.shape[0] == 3
    model.reset_head(7)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (3, 7) and torch.count_nonzero(out) == 0  # zero-initialised head


def test_pos_embed_resize_same_grid_is_identity():
    pos = torch.randn(1, 1 + 14 * 14, 8)
    assert torch.equal(vit.resize_pos_embed(pos, 14), pos)


def test_pos_embed_resize_is_linear_interpolation_with_class_token_kept():
    # Embeddings that are a linear function of the patch position are reproduced exactly by 2-D
    # linear interpolation with aligned corners (the paper's code: scipy.ndimage.zoom, order 1).
    old, new = 14, 24
    ii, jj = torch.meshgrid(torch.arange(old, dtype=torch.float64), torch.arange(old, dtype=torch.float64),
                            indexing="ij")
    grid = torch.stack([ii, jj, 3 * ii - 2 * jj + 1], dim=-1).reshape(1, old * old, 3)
    cls = torch.tensor([[[7.0, -7.0, 0.5]]], dtype=torch.float64)
    out = vit.resize_pos_embed(torch.cat([cls, grid], dim=1), new)
    assert out.shape == (1, 1 + new * new, 3) and torch.equal(out[:, :1], cls)
    scale = (old - 1) / (new - 1)
    ni, nj = torch.meshgrid(torch.arange(new, dtype=torch.float64) * scale,
                            torch.arange(new, dtype=torch.float64) * scale, indexing="ij")
    expect = torch.stack([ni, nj, 3 * ni - 2 * nj + 1], dim=-1).reshape(1, new * new, 3)
    torch.testing.assert_close(out[:, 1:], expect, rtol=0, atol=1e-5)


def test_vit_224_state_loads_into_384_model():
    small = vit.create("Ti", 16)
    big = vit.create("Ti", 16, image_size=384)
    big.load_state_dict(big.adapt_state_dict(small.state_dict()))
    assert big.pos_embed.shape == (1, 577, 192)
    assert torch.equal(big.pos_embed[:, 0], small.pos_embed[:, 0])
    with torch.no_grad():
        assert big(torch.randn(1, 3, 384, 384)).shape == (1, 1000)
