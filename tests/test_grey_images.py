"""Grey images as users of timm and torchvision feed them to a model: `Image.convert("RGB")`, then the
model's transform, each channel normalised with its own mean and std. An in-memory dataset
(Fashion-MNIST, digits) evaluated with an evaluation transform (a checkpoint's, or a suite's `mean`,
`std`, `crop_pct`, ...) goes through that transform image by image, so the settings apply and the
tensors equal torchvision's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from benchbench.store.record import split_result
from benchbench.run.worker import context_for
from benchbench.specs import DataOptions, Preprocessing
from benchbench_plugins.datasets.transforms import PixelImages, TensorImages, eval_transform
from benchbench_plugins.protocols import evaluate

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def _grey(seed: int = 0, size: int = 28) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (size, size), dtype=np.uint8)


def test_grey_into_three_channels_is_convert_rgb_then_the_transform():
    """Each channel takes its own mean and std (the red channel's alone, before: every channel the same)."""
    pre = Preprocessing.from_crop_pct(32, 0.9, interpolation="bicubic", **IMAGENET)
    grey = Image.fromarray(_grey(), mode="L")
    theirs = T.Compose([T.Resize(35, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(32), T.ToTensor(),
                        T.Normalize(IMAGENET["mean"], IMAGENET["std"])])(grey.convert("RGB"))
    ours = eval_transform(pre, in_chans=3)(grey)
    assert ours.shape == (3, 32, 32) and torch.equal(ours, theirs)
    assert not torch.equal(ours[0], ours[1])  # the channels differ by their means and stds


def test_pixel_images_are_the_files_a_folder_would_hold():
    pixels = torch.from_numpy(np.stack([_grey(i) for i in range(3)]))[:, None]
    pre = Preprocessing(crop_size=28, resize_size=28, resize_mode="squash", mean=(0.5,), std=(0.25,))
    split = PixelImages(pixels, torch.tensor([4, 5, 6]), eval_transform(pre, in_chans=1))
    x, y = split[1]
    reference = T.Compose([T.Resize((28, 28)), T.ToTensor(), T.Normalize((0.5,), (0.25,))])
    assert int(y) == 5 and torch.equal(x, reference(Image.fromarray(_grey(1), mode="L")))


def _evaluate(catalog, tiny_data, tmp_path, **settings):
    from benchbench.weights.checkpoints import save_checkpoint

    torch.manual_seed(0)
    spec = catalog.models.get("vit-mu7")
    ckpt = tmp_path / "vit-mu7.safetensors"
    if not ckpt.exists():
        model = spec.build(num_classes=10, image_size=28, in_chans=1)
        torch.nn.init.normal_(model.head.weight)  # a zero head scores every class alike
        save_checkpoint(model, ckpt, num_classes=10)
    data = DataOptions(root=tiny_data, image_size=28, in_chans=1)
    return split_result(evaluate.run(context_for(catalog, "evaluate", "vit-mu7", "fashion-mnist",
                                                 {"init": str(ckpt), **settings}, data=data, show_progress=False)))


def test_mean_and_std_settings_apply_on_fashion_mnist(catalog, tiny_data, tmp_path):
    """Before, an in-memory split ignored them: the same predictions under another cell key."""
    plain_metrics, plain = _evaluate(catalog, tiny_data, tmp_path)
    metrics, fields = _evaluate(catalog, tiny_data, tmp_path, mean=[0.5], std=[0.25])
    assert "preprocessing" not in plain  # the dataset's own normalisation, as before
    assert fields["preprocessing"]["mean"] == [0.5, 0.5, 0.5] and fields["preprocessing"]["std"] == [0.25] * 3
    a, b = plain_metrics["predictions"], metrics["predictions"]
    assert not np.array_equal(a.p_true, b.p_true)


def test_fashion_mnist_with_a_transform_gives_pixel_images(tiny_data):
    from benchbench_plugins.datasets import fashion_mnist

    pre = Preprocessing(crop_size=28, resize_size=28, resize_mode="squash", mean=(0.5,), std=(0.5,))
    as_is = fashion_mnist.load("test", DataOptions(root=tiny_data, image_size=28, in_chans=1))
    with_pre = fashion_mnist.load("test", DataOptions(root=tiny_data, image_size=28, in_chans=1, preprocessing=pre))
    assert isinstance(as_is, TensorImages) and isinstance(with_pre, PixelImages)
    assert torch.equal(with_pre.targets, as_is.tensors[1])
    # (pixel / 255 - 0.5) / 0.5 from the same uint8 pixels the default path normalises
    x, _ = with_pre[0]
    back = as_is.tensors[0][0] * 0.3530 + 0.2860  # the dataset's own mean / std undone
    assert torch.allclose((x + 1) / 2, back, atol=1e-5)
