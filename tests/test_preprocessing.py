"""A cell's evaluation transform (plugins/datasets/transforms.py `eval_transform`, through `photo_transform`)
gives the tensors that timm's `resolve_data_config` + `create_transform` and torchvision's
`weights.transforms()` give, on JPEG files written here: the same library operations, so equal bit for bit."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from benchbench.weights.config import timm_preprocessing
from benchbench.specs import DataOptions, Preprocessing
from benchbench_plugins.datasets.transforms import at_size, open_image, photo_transform

timm = pytest.importorskip("timm")
from timm.data import create_transform, resolve_data_config  # noqa: E402

from benchbench_plugins.models.timm_zoo import preprocessing_of  # noqa: E402
from benchbench_plugins.models.torchvision_zoo import weights_preprocessing  # noqa: E402


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> list[str]:
    """Landscape, portrait and square photos of smooth noise, as JPEG (what ImageNet's files are)."""
    from PIL import Image

    d = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    paths = []
    for i, (w, h) in enumerate([(301, 217), (190, 263), (256, 256)]):
        coarse = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC)
        path = d / f"img{i}.JPEG"
        img.save(path, quality=90)
        paths.append(str(path))
    return paths


def ours(pre: Preprocessing, path: str, size: int | None = None) -> torch.Tensor:
    """What a file-backed dataset gives a cell whose preprocessing is `pre` (model at `size` px)."""
    options = DataOptions(image_size=size or pre.crop_size, in_chans=3, preprocessing=pre)
    return photo_transform(options, native_size=224)(open_image(path))


TIMM_TAGS = ["resnet50.a1_in1k", "vit_base_patch16_224.augreg2_in21k_ft_in1k", "convnext_tiny.fb_in1k",
             "resnetv2_50x1_bit.goog_in21k_ft_in1k", "deit_small_patch16_224.fb_in1k"]


@pytest.mark.parametrize("tag", TIMM_TAGS)
@pytest.mark.parametrize("test_size", [False, True])
def test_equals_timm_create_transform(jpegs, tag, test_size):
    cfg = timm.models.get_pretrained_cfg(tag).to_dict()
    data_config = resolve_data_config({}, pretrained_cfg=cfg, use_test_size=test_size)
    theirs = create_transform(**data_config)
    pre = preprocessing_of(cfg, test_size=test_size)
    # the same transform read from a checkpoint's config.json (timm's hub layout)
    assert timm_preprocessing({"architecture": tag.split(".")[0], "pretrained_cfg": cfg}, test=test_size) \
        == Preprocessing(**{**pre.__dict__, "source": timm_preprocessing(
            {"architecture": tag.split(".")[0], "pretrained_cfg": cfg}, test=test_size).source})
    assert pre.crop_size == data_config["input_size"][-1] and pre.interpolation == data_config["interpolation"]
    for path in jpegs:
        expected = theirs(open_image(path))
        got = ours(pre, path)
        assert got.shape == expected.shape == (3, pre.crop_size, pre.crop_size)
        assert torch.equal(got, expected), (tag, path, (got - expected).abs().max())


def test_timm_squash_mode(jpegs):
    """crop_mode "squash": both sides to floor(size / crop_pct), then the centre crop."""
    cfg = {"input_size": (3, 160, 160), "crop_pct": 0.9, "crop_mode": "squash", "interpolation": "bicubic",
           "mean": (0.48, 0.45, 0.4), "std": (0.26, 0.26, 0.27)}
    theirs = create_transform(**resolve_data_config({}, pretrained_cfg=cfg))
    pre = preprocessing_of(cfg)
    assert (pre.resize_mode, pre.resize_size) == ("squash", 177)
    for path in jpegs:
        assert torch.equal(ours(pre, path), theirs(open_image(path)))


@pytest.mark.parametrize("builder,weights", [("resnet50", "ResNet50_Weights.IMAGENET1K_V2"),
                                             ("vit_b_16", "ViT_B_16_Weights.IMAGENET1K_V1"),
                                             ("efficientnet_b1", "EfficientNet_B1_Weights.IMAGENET1K_V2")])
def test_equals_torchvision_weights_transforms(jpegs, builder, weights):
    import torchvision.models as tvm

    enum, name = weights.split(".")
    w = getattr(tvm, enum)[name]
    # a file of these weights is told by the sha256 prefix torchvision puts in its name
    sha = re.search(r"-([0-9a-f]{6,})\.pth$", w.url).group(1).ljust(64, "0")
    pre = weights_preprocessing(builder, {}, sha)
    assert pre is not None and pre.crop_size == w.transforms().crop_size[0]
    theirs = w.transforms()
    for path in jpegs:
        img = open_image(path)
        assert torch.equal(ours(pre, path), theirs(img))


def test_at_another_size_keeps_crop_pct(jpegs):
    """A 224 px checkpoint's transform for a model built at 160 px is timm's at img_size 160: the same
    crop_pct, interpolation and mean/std."""
    cfg = timm.models.get_pretrained_cfg("resnet50.a1_in1k").to_dict()
    pre = at_size(preprocessing_of(cfg), 160)
    assert (pre.crop_size, pre.resize_size) == (160, 168)  # floor(160 / 0.95)
    theirs = create_transform(**{**resolve_data_config({}, pretrained_cfg=cfg), "input_size": (3, 160, 160)})
    assert torch.equal(ours(preprocessing_of(cfg), jpegs[0], size=160), theirs(open_image(jpegs[0])))


def test_without_preprocessing_the_default_stays(jpegs):
    """No preprocessing: the dataset's default (squash to the size, ViT paper's 0.5 mean/std)."""
    from PIL import Image

    img = open_image(jpegs[0])
    got = photo_transform(DataOptions(image_size=64, in_chans=3), 224)(img)
    ref = np.asarray(img.resize((64, 64), Image.Resampling.BILINEAR), dtype=np.float32) / 127.5 - 1
    np.testing.assert_allclose(got.numpy(), ref.transpose(2, 0, 1), atol=1e-6)
