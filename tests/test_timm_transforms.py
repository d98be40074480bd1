"""Every pretrained tag of timm, at five sizes, against timm's own evaluation transform: timm's
`resolve_data_config({"img_size": size}, pretrained_cfg=...)` + `create_transform` (what timm's
validate.py builds for `--img-size`) against benchbench's `preprocessing_of` (the tag's transform) +
`at_size` + `eval_transform`. Configs only: no weights are read.

Compared as the operations each pipeline does (resize side and filter, crop, mean, std: the same
PIL and torchvision operations on both sides), and, on two small photos, as tensors bit for bit (at
32 and 96 px; every size: 5 minutes). The default test takes one tag per distinct configuration
(crop_pct, crop_mode, interpolation, mean, std); the `slow` one every tag: 9,075 transforms of
1,815 tags (11 refused: a bordered crop or a non-square input), compared in about 3 s, and the
tensors at 32 px.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")
from timm.data import create_transform, resolve_data_config  # noqa: E402
from timm.models import get_pretrained_cfg  # noqa: E402

from benchbench.weights.config import timm_preprocessing  # noqa: E402
from benchbench_plugins.datasets.transforms import at_size, eval_transform  # noqa: E402
from benchbench_plugins.models.timm_zoo import preprocessing_of  # noqa: E402

SIZES = (32, 96, 224, 384)  # and each tag's own size: five
# Tags whose transform benchbench does not represent (a bordered crop, a non-square input), refused
# naming why when bound; everything else is compared.
REFUSED = ("crop_mode 'border' has no benchbench equivalent", "is not square")


def _configs() -> dict[str, dict]:
    return {tag: get_pretrained_cfg(tag).to_dict() for tag in timm.list_pretrained()}


CONFIGS = _configs()


def _representatives() -> list[str]:
    """One tag per distinct evaluation configuration."""
    seen: dict[tuple, str] = {}
    for tag, cfg in CONFIGS.items():
        key = tuple(str(cfg.get(k)) for k in ("crop_pct", "crop_mode", "interpolation", "mean", "std",
                                                "test_crop_pct", "test_input_size"))
        seen.setdefault(key, tag)
    return sorted(seen.values())


def timm_steps(transform) -> tuple:
    """(resize side, filter, crop, mean, std) of timm's eval Compose: Resize, CenterCrop, ToTensor, Normalize."""
    resize, crop, normalize = transform.transforms[0], transform.transforms[1], transform.transforms[-1]
    assert type(resize).__name__ == "Resize" and type(crop).__name__ == "CenterCrop", transform
    side = resize.size if isinstance(resize.size, int) else tuple(resize.size)
    return (side, resize.interpolation.value, tuple(crop.size), tuple(normalize.mean.tolist()),
            tuple(normalize.std.tolist()))


def our_steps(transform) -> tuple:
    resize, crop, normalise = transform.transforms
    side = resize.size[0] if len(resize.size) == 1 else tuple(resize.size)
    return (side, resize.interpolation.value, tuple(crop.size), tuple(normalise.mean.flatten().tolist()),
            tuple(normalise.std.flatten().tolist()))


@pytest.fixture(scope="module")
def photos():
    """A landscape and a portrait photo of smooth noise, RGB."""
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for w, h in ((53, 37), (30, 61)):
        coarse = rng.integers(0, 256, (h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
        out.append(Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC))
    return out


def check(tags: list[str], photos, pixel_sizes=()) -> tuple[int, list[str]]:
    """(transforms compared, tags refused); asserts each compared transform does timm's operations, and
    at `pixel_sizes` gives timm's tensors on `photos`."""
    compared, refused = 0, []
    for tag in tags:
        cfg = CONFIGS[tag]
        try:
            pre = preprocessing_of(cfg)
        except ValueError as exc:
            assert any(why in str(exc) for why in REFUSED), (tag, exc)
            refused.append(tag)
            continue
        for size in (*SIZES, cfg["input_size"][-1]):
            theirs = create_transform(**resolve_data_config({"img_size": size}, pretrained_cfg=cfg), is_training=False)
            ours = eval_transform(at_size(pre, size))
            assert our_steps(ours) == timm_steps(theirs), (tag, size)
            for photo in photos if size in pixel_sizes else ():
                assert torch.equal(ours(photo), theirs(photo)), (tag, size)
            compared += 1
    return compared, refused


def test_representative_tags_at_five_sizes_equal_timms(photos):
    tags = _representatives()
    compared, refused = check(tags, photos, pixel_sizes=(32, 96))
    assert len(tags) > 100 and compared == 5 * (len(tags) - len(refused))


@pytest.mark.slow
def test_every_tag_at_five_sizes_equals_timms(photos):
    tags = sorted(CONFIGS)
    compared, refused = check(tags, photos, pixel_sizes=(32,))
    assert compared == 5 * (len(tags) - len(refused)) and len(refused) <= 20, refused


def test_crop_pct_is_kept_not_rebuilt_from_rounded_sides():
    """inception_v3.tv_in1k: crop_pct 0.875 at 299 px gives a resize side of 341, whose ratio 299 / 341
    = 0.8768 gives 255 at 224 px where timm (224 / 0.875) gives 256."""
    pre = preprocessing_of(CONFIGS["inception_v3.tv_in1k"])
    assert (pre.crop_size, pre.resize_size, pre.crop_pct) == (299, 341, 0.875)
    assert at_size(pre, 224).resize_size == 256 == timm_steps(create_transform(
        **resolve_data_config({"img_size": 224}, pretrained_cfg=CONFIGS["inception_v3.tv_in1k"])))[0]


def test_a_config_without_interpolation_is_bicubic_as_timms():
    """timm's resolve_data_config names bicubic where the pretrained config names no filter; so do a
    config.json's reader and the tag reader."""
    cfg = {k: v for k, v in CONFIGS["resnet50.a1_in1k"].items() if k != "interpolation"}
    assert resolve_data_config({}, pretrained_cfg=cfg)["interpolation"] == "bicubic"
    assert preprocessing_of(cfg).interpolation == "bicubic"
    assert timm_preprocessing({"architecture": "resnet50", "pretrained_cfg": {**cfg, "interpolation": None}}
                              ).interpolation == "bicubic"


def test_a_crop_beyond_the_image_pads_as_timms(photos):
    """volo_d5_512.sail_in1k's crop_pct is 1.15: resized to 445 px and cropped to 512, which pads."""
    cfg = CONFIGS["volo_d5_512.sail_in1k"]
    pre = preprocessing_of(cfg)
    assert (pre.crop_size, pre.resize_size) == (512, 445)
    theirs = create_transform(**resolve_data_config({}, pretrained_cfg=cfg))
    assert torch.equal(eval_transform(pre)(photos[0]), theirs(photos[0]))
