"""timm-layout checkpoints in benchbench's ViT, hybrid and BiT: logits equal timm's own models' on the
same random weights, saved by timm's side with `safetensors.torch.save_file(model.state_dict(), ...)`.

timm is the independent source: its models are built by timm, their weights perturbed at random (so
zero-initialised tensors carry information), saved, loaded through benchbench's loader into our model,
and both run on the same input. The default tests shrink depth (timm's `depth=2`, our width with the
same depth; BiT with fewer units per stage, built by timm's ResNetV2 with its BiT arguments); full-size
models are `slow`. Tolerances: the ViTs in float32, rtol = atol = 1e-5; the hybrids and BiTs (50 to 150
standardised convolutions, whose float32 rounding differs between timm's and our kernels by up to 6e-4
relative) in float64, rtol = atol = 1e-9.

Two published differences in arithmetic, not in the mapping, are pinned apart:
- BiT: timm standardises conv weights with sqrt(var + 1e-8), the BiT release (and ours) sqrt(var + 1e-10);
  the exact comparison gives timm's StdConv2d BiT's epsilon through its own `eps` argument.
- Hybrids: timm standardises with sqrt(var + 1e-8) and GroupNorm eps 1e-5, the paper's code
  (vit_jax/models_resnet.py, and ours) with (w - mean) / (std + 1e-5) and eps 1e-6; the exact comparison
  gives timm's StdConv2dSame vit_jax's formula, written out here from vit_jax, and its GroupNorms eps 1e-6.
Unchanged timm agrees within the tolerance those differences explain.
"""

from __future__ import annotations

import dataclasses
import json
from functools import partial

import pytest
import torch
import torch.nn.functional as F

timm = pytest.importorskip("timm")
from safetensors.torch import save_file  # noqa: E402
from timm.layers import GroupNormAct, StdConv2d, StdConv2dSame  # noqa: E402
from timm.models.resnetv2 import ResNetV2 as TimmResNetV2  # noqa: E402

from benchbench.weights.checkpoints import load_checkpoint, load_weights  # noqa: E402
from benchbench_plugins.models import bit_timm, hybrid, resnetv2, vit_timm  # noqa: E402
from benchbench_plugins.models import vision_transformer as vit  # noqa: E402

EXACT = dict(rtol=1e-5, atol=1e-5)
EXACT64 = dict(rtol=1e-9, atol=1e-9)


@pytest.fixture(autouse=True, scope="module")
def two_threads():
    n = torch.get_num_threads()
    torch.set_num_threads(min(n, 2))
    yield
    torch.set_num_threads(n)


def randomised(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


def saved(model, path, config=None):
    """timm's side: its state dict as a .safetensors file, and its config.json beside it where given."""
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata={"format": "pt"})
    if config is not None:
        (path.parent / "config.json").write_text(json.dumps(config))
    return path


def logits(model, x):
    with torch.no_grad():
        return model.eval()(x)


def ours_vit(width, patch, depth, image_size, num_classes):
    torch.manual_seed(0)
    w = dataclasses.replace(vit.WIDTHS[width], depth=depth)
    return vit.VisionTransformer(w, patch, num_classes=num_classes, image_size=image_size)


# --- ViT ----------------------------------------------------------------------------------------------------

VITS = [  # timm name, our width, patch, image size
    ("vit_tiny_patch16_224", "Ti", 16, 224),
    ("vit_small_patch32_384", "S", 32, 384),
    ("vit_base_patch16_224", "B", 16, 96),
    ("vit_large_patch32_224", "L", 32, 64),
]


@pytest.mark.parametrize("name,width,patch,size", VITS, ids=[v[0] for v in VITS])
def test_timm_vit_logits_equal_timms(tmp_path, name, width, patch, size):
    t = randomised(timm.create_model(name, depth=2, num_classes=7, img_size=size))
    path = saved(t, tmp_path / "model.safetensors")
    model = ours_vit(width, patch, 2, size, 7)
    report = load_checkpoint(model, path, layouts=(vit_timm.LAYOUT,))
    assert report.source == "timm vit" and report.provenance.layout == "timm vit"
    assert report.provenance.format == "safetensors" and report.keys_loaded == len(model.state_dict())
    x = torch.randn(2, 3, size, size)
    out = logits(model, x)
    torch.testing.assert_close(out, logits(t, x), **EXACT)
    assert out.abs().max() > 1  # not a trivially small output


def test_full_timm_vit_ti16_through_the_catalog_spec(tmp_path, catalog):
    t = randomised(timm.create_model("vit_tiny_patch16_224", num_classes=1000))
    cfg = {"architecture": "vit_tiny_patch16_224", "num_classes": 1000, "global_pool": "token",
           "pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.9, "interpolation": "bicubic",
                              "mean": [0.5] * 3, "std": [0.5] * 3}}
    path = saved(t, tmp_path / "model.safetensors", cfg)
    spec = catalog.models.get("vit-ti16")
    model = spec.build(num_classes=1000, image_size=224, in_chans=3)
    report = load_weights(model, path, spec)
    x = torch.randn(2, 3, 224, 224)
    torch.testing.assert_close(logits(model, x), logits(t, x), **EXACT)
    pre = report.preprocessing
    assert (pre.crop_size, pre.resize_size, pre.interpolation, pre.mean) == (224, 248, "bicubic", (0.5, 0.5, 0.5))


@pytest.mark.slow
@pytest.mark.parametrize("name,spec_id", [("vit_base_patch16_224", "vit-b16"), ("vit_small_patch16_384", "vit-s16"),
                                          ("vit_large_patch32_384", "vit-l32")])
def test_full_size_timm_vits(tmp_path, catalog, name, spec_id):
    t = randomised(timm.create_model(name, num_classes=1000))
    size = t.patch_embed.img_size[0]
    path = saved(t, tmp_path / "model.safetensors")
    spec = catalog.models.get(spec_id)
    model = spec.build(num_classes=1000, image_size=size, in_chans=3)
    load_weights(model, path, spec)
    x = torch.randn(1, 3, size, size)
    torch.testing.assert_close(logits(model, x), logits(t, x), **EXACT)


# --- hybrids --------------------------------------------------------------------------------------------------

HYBRIDS = [  # timm name, our units, width, output stride
    ("vit_base_r50_s16_224", hybrid.R50_S16, "B", 16),
    ("vit_large_r50_s32_224", hybrid.R50_S32, "L", 32),
]


def vit_jax_standardised(conv, x):
    """vit_jax models_resnet.py StdConv: w - mean, then / (std + 1e-5) over each filter; TF SAME padding."""
    w = conv.weight
    w = w - w.mean(dim=(1, 2, 3), keepdim=True)
    w = w / (w.std(dim=(1, 2, 3), keepdim=True, unbiased=False) + 1e-5)
    k, s = conv.kernel_size[0], conv.stride[0]
    pads = [max((-(-n // s) - 1) * s + k - n, 0) for n in x.shape[-2:]]
    x = F.pad(x, (pads[1] // 2, pads[1] - pads[1] // 2, pads[0] // 2, pads[0] - pads[0] // 2))
    return F.conv2d(x, w, conv.bias, s)


def timm_hybrid(name, size, *, as_vit_jax):
    t = randomised(timm.create_model(name, depth=2, num_classes=7, img_size=size))
    if as_vit_jax:
        for m in t.modules():
            if isinstance(m, StdConv2dSame):
                m.forward = partial(vit_jax_standardised, m)
            elif isinstance(m, GroupNormAct):
                m.eps = 1e-6
    return t


def ours_hybrid(units, width, size):
    torch.manual_seed(0)
    model = hybrid.create(units, width, num_classes=7, image_size=size)
    model.blocks = model.blocks[:2]
    return model


@pytest.mark.parametrize("name,units,width,stride", HYBRIDS, ids=[h[0] for h in HYBRIDS])
def test_timm_hybrid_logits_equal_timms_with_the_papers_standardisation(tmp_path, name, units, width, stride):
    size = 64  # 4x4 tokens at stride 16, 2x2 at 32
    t = timm_hybrid(name, size, as_vit_jax=True)
    path = saved(t, tmp_path / "model.safetensors")
    model = ours_hybrid(units, width, size)
    report = load_checkpoint(model, path, layouts=(vit_timm.LAYOUT,))
    assert report.keys_loaded == len(model.state_dict())
    x = torch.randn(2, 3, size, size, dtype=torch.float64)
    out = logits(model.double(), x)
    torch.testing.assert_close(out, logits(t.double(), x), **EXACT64)
    assert out.abs().max() > 0.1


def test_timm_hybrid_differs_from_unchanged_timm_only_by_its_standardisation(tmp_path):
    """timm's sqrt(var + 1e-8) and GN eps 1e-5 against the paper's std + 1e-5 and eps 1e-6: with filters of
    standard deviation about 0.1 (1e-5 / 0.1 = 1e-4 relative per conv), logits agree to 1e-3 relative."""
    name, units, width, stride = HYBRIDS[0]
    t = timm_hybrid(name, 64, as_vit_jax=False)
    model = ours_hybrid(units, width, 64)
    load_checkpoint(model, saved(t, tmp_path / "model.safetensors"), layouts=(vit_timm.LAYOUT,))
    x = torch.randn(2, 3, 64, 64)
    a, b = logits(model, x), logits(t, x)
    scale = b.abs().max()
    assert 1e-6 < (a - b).abs().max() / scale < 1e-3  # different arithmetic, same weights in the same places


@pytest.mark.slow
@pytest.mark.parametrize("name,spec_id", [("vit_base_r50_s16_384", "r50x1+vit-b16"),
                                          ("vit_large_r50_s32_224", "r50x1+vit-l32")])
def test_full_size_timm_hybrids(tmp_path, catalog, name, spec_id):
    t = randomised(timm.create_model(name, num_classes=1000))
    for m in t.modules():
        if isinstance(m, StdConv2dSame):
            m.forward = partial(vit_jax_standardised, m)
        elif isinstance(m, GroupNormAct):
            m.eps = 1e-6
    size = int(name[-3:])
    spec = catalog.models.get(spec_id)
    model = spec.build(num_classes=1000, image_size=size, in_chans=3)
    load_weights(model, saved(t, tmp_path / "model.safetensors"), spec)
    x = torch.randn(1, 3, size, size, dtype=torch.float64)
    torch.testing.assert_close(logits(model.double(), x), logits(t.double(), x), **EXACT64)


# --- BiT ------------------------------------------------------------------------------------------------------

def timm_bit(layers, width_factor, *, eps=1e-8):
    """timm's BiT as `_create_resnetv2_bit` builds it (stem "fixed", StdConv2d), with `layers` units."""
    torch.manual_seed(0)
    return randomised(TimmResNetV2(layers=list(layers), width_factor=width_factor, num_classes=7, stem_type="fixed",
                                   conv_layer=partial(StdConv2d, eps=eps)))


BITS = [  # timm's BiT model, the units of the copy (shrunk: fewer units, or stages, of the same width), width factor
    ("resnetv2_50x1_bit", (3, 4, 6, 3), 1),
    ("resnetv2_50x3_bit", (1, 1, 1), 3),
    ("resnetv2_152x2_bit", (1, 2, 1), 2),
]


@pytest.mark.parametrize("name,units,wf", BITS, ids=[b[0] for b in BITS])
def test_timm_bit_logits_equal_timms(tmp_path, name, units, wf):
    t = timm_bit(units, wf, eps=resnetv2.WS_EPS)  # BiT's epsilon, through timm's own argument
    path = saved(t, tmp_path / "model.safetensors")
    model = resnetv2.ResNetV2(units, wf, num_classes=7)
    report = load_checkpoint(model, path, layouts=(bit_timm.LAYOUT,))
    assert report.source == "timm bit" and report.keys_loaded == len(model.state_dict())
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    out = logits(model.double(), x)
    torch.testing.assert_close(out, logits(t.double(), x), **EXACT64)
    assert out.abs().max() > 0.1
    unchanged = timm_bit(units, wf).double()  # the same weights (same seeds), timm's own epsilon 1e-8
    diff = (out - logits(unchanged, x)).abs().max() / out.abs().max()
    assert 1e-9 < diff < 1e-5, diff  # (1e-8 - 1e-10) / 2 / var(w), var about 0.01: ~5e-7 per conv


def test_timm_create_model_bit_is_what_the_shrunk_copies_build():
    """The shrunk BiTs above are timm's ResNetV2 with the arguments timm's resnetv2_*_bit use."""
    with torch.device("meta"):
        a = timm.create_model("resnetv2_50x3_bit", num_classes=7)
        b = TimmResNetV2(layers=[3, 4, 6, 3], width_factor=3, num_classes=7, stem_type="fixed",
                         conv_layer=partial(StdConv2d, eps=1e-8))
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}
    assert repr(a) == repr(b)


@pytest.mark.slow
@pytest.mark.parametrize("name,spec_id", [("resnetv2_101x1_bit", "bit-r101x1"), ("resnetv2_152x2_bit", "bit-r152x2")])
def test_full_size_timm_bits(tmp_path, catalog, name, spec_id):
    t = randomised(timm.create_model(name, num_classes=1000))
    for m in t.modules():
        if isinstance(m, StdConv2d):
            m.eps = resnetv2.WS_EPS
    spec = catalog.models.get(spec_id)
    model = spec.build(num_classes=1000, image_size=224, in_chans=3)
    load_weights(model, saved(t, tmp_path / "model.safetensors"), spec)
    x = torch.randn(1, 3, 128, 128, dtype=torch.float64)
    torch.testing.assert_close(logits(model.double(), x), logits(t.double(), x), **EXACT64)


def test_a_bfloat16_file_loads_into_a_float32_model(tmp_path):
    """Hub files are often stored in bfloat16: the loader copies them into the model's float32 exactly."""
    t = randomised(timm.create_model("vit_tiny_patch16_224", depth=1, num_classes=5, img_size=32))
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in t.state_dict().items()}, str(tmp_path / "m.safetensors"))
    model = ours_vit("Ti", 16, 1, 32, 5)
    load_checkpoint(model, tmp_path / "m.safetensors", layouts=(vit_timm.LAYOUT,))
    assert model.blocks[0].attn.qkv.weight.dtype == torch.float32
    assert torch.equal(model.blocks[0].attn.qkv.weight, t.blocks[0].attn.qkv.weight.to(torch.bfloat16).float())
