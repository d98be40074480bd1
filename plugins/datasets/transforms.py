"""Images as models take them: uint8 -> normalised float, resized, grey replicated to the model's
channels, augmented for training.

Two kinds of datasets come out of the dataset plugins:
- `TensorImages`: the whole split in memory (Fashion-MNIST, CIFAR). Batches are slices of one tensor;
  resizing, channel replication and augmentation run once per batch on the batch (`BatchTransform`),
  so the 28 px fast path costs nothing and 224 px never materialises the resized split.
- file-backed datasets (torchvision's classes, folders): one image per item through `photo_transform`,
  batched by a DataLoader with worker processes. An in-memory split evaluated with a cell's evaluation
  transform goes this way too (`PixelImages`: its uint8 pixels as PIL images), so the transform is
  the one timm and torchvision apply, whatever holds the split.

Normalisation: Fashion-MNIST keeps its published mean/std; every other dataset is scaled to [-1, 1]
as the ViT paper's code does (`image / 127.5 - 1`, i.e. mean = std = 0.5 per channel).

A cell's own evaluation transform (`DataOptions.preprocessing`: a checkpoint's, a model's, a suite's)
replaces a file-backed dataset's default: resize (the shorter side, or both: squash), centre crop,
interpolation, mean/std, with the same library operations as timm's `create_transform` and
torchvision's `weights.transforms()` on PIL images, so the tensors are equal to theirs
(`eval_transform`). Its mean/std also normalise the training images of that cell.

Grey images into a model of 3 channels are replicated before they are normalised, so the model's own
per-channel mean/std apply to each channel: what `Image.convert("RGB")` and then timm's or
torchvision's transform give.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from benchbench.errors import BenchError
from benchbench.specs import DataOptions, Preprocessing

VIT_MEAN = VIT_STD = (0.5, 0.5, 0.5)  # [0, 1] -> [-1, 1], the ViT paper's input scaling


def match_channels(x: torch.Tensor, in_chans: int | None) -> torch.Tensor:
    """(..., C, H, W) with C = in_chans: grey (C = 1) is replicated; anything else must already fit."""
    c = x.shape[-3]
    if in_chans is None or c == in_chans:
        return x
    if c == 1:
        return x.expand(*x.shape[:-3], in_chans, *x.shape[-2:]).clone()
    raise BenchError(f"cannot feed {c}-channel images to a model that takes {in_chans} channels "
                     "(only grey images are replicated)")


def target_size(options: DataOptions, native: int) -> int:
    return int(options.image_size or native)


class BatchTransform:
    """What in-memory images need per batch (N, C, H, W): uint8 -> [0, 1], normalise, resize to
    `size` (bilinear, antialiased when shrinking), random horizontal flip (`flip`), grey -> in_chans.

    The flip's random numbers (one uniform per image, flipped below 0.5) are `draws` when given (see
    `draws`: a data-parallel loader draws them for the whole global batch and hands each rank its
    part), else from torch's global generator.
    """

    def __init__(self, *, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 size: int | None = None, in_chans: int | None = None, flip: bool = False):
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.size, self.in_chans, self.flip = size, in_chans, flip

    def draws(self, n: int, generator: torch.Generator) -> torch.Tensor | None:
        """The random numbers the augmentation of `n` images takes, from `generator` (row i: image
        i's); None when this transform is not random."""
        return torch.rand(n, generator=generator) if self.flip else None

    def __call__(self, x: torch.Tensor, draws: torch.Tensor | None = None) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        if self.size is not None and tuple(x.shape[-2:]) != (self.size, self.size):
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False,
                              antialias=self.size < max(x.shape[-2:]))
        if self.flip:
            # drawn where the batch is (the data may live on the GPU)
            flipped = (torch.rand(len(x), device=x.device) if draws is None else draws.to(x.device)) < 0.5
            x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
        return match_channels(x, self.in_chans)

    def to(self, device: torch.device) -> "BatchTransform":
        """This transform for batches held on `device` (its mean and std there)."""
        out = copy.copy(self)
        out.mean = None if self.mean is None else self.mean.to(device)
        out.std = None if self.std is None else self.std.to(device)
        return out

    @property
    def is_identity(self) -> bool:
        return self.mean is None and self.size is None and self.in_chans is None and not self.flip


class TensorImages(TensorDataset):
    """A split held in memory: images (N, C, H, W) and labels (N,), plus a per-batch transform.

    `tensors` are the stored images (as read, possibly uint8); `transform` turns a batch of them into
    what the model takes. Training code slices `tensors` and calls `transform` once per batch.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: BatchTransform | None = None):
        super().__init__(images, labels)
        self.transform = None if transform is None or transform.is_identity else transform

    def __getitem__(self, index):
        x, y = self.tensors[0][index], self.tensors[1][index]
        if self.transform is not None:
            x = self.transform(x[None])[0]
        return x, y

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """A batch of stored images as the model takes them."""
        return x if self.transform is None else self.transform(x)


def tensor_images(images: torch.Tensor, labels: torch.Tensor, options: DataOptions, *, native_size: int,
                  mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                  pixels: torch.Tensor | None = None) -> TensorImages | PixelImages:
    """In-memory images honouring `options`: resized to image_size, channels to in_chans, augmented.
    With a cell's evaluation transform (`options.preprocessing`, not augmented), the split's uint8
    pixels (`pixels`, else `images` where they are uint8) go through it image by image
    (`PixelImages`), as timm and torchvision would transform them."""
    if options.preprocessing is not None and not options.augment:
        raw = pixels if pixels is not None else images
        if raw.dtype != torch.uint8:
            raise BenchError("this dataset keeps no uint8 pixels, so it cannot take an evaluation transform; "
                             "set preprocessing = \"dataset\" and no crop_pct, interpolation, resize_mode, mean "
                             "or std for it")
        size = target_size(options, native_size)
        return PixelImages(raw, labels, eval_transform(at_size(options.preprocessing, size), options.in_chans))
    size = target_size(options, native_size)
    transform = BatchTransform(mean=mean, std=std, size=None if size == native_size else size,
                               in_chans=None if options.in_chans in (None, images.shape[1]) else options.in_chans,
                               flip=options.augment)
    return TensorImages(images, labels, transform)


class PixelImages(Dataset):
    """A split held in memory as uint8 pixels (N, C, H, W), C 1 or 3, each image given to `transform`
    as a PIL image ("L" or "RGB"), as a file-backed dataset gives its files; `targets` are the labels."""

    def __init__(self, pixels: torch.Tensor, labels: torch.Tensor, transform):
        if pixels.ndim != 4 or pixels.shape[1] not in (1, 3) or len(pixels) != len(labels):
            raise ValueError(f"pixels {tuple(pixels.shape)} and {len(labels)} labels: expected (N, 1 or 3, H, W)")
        self.pixels, self.targets, self.transform = pixels, labels, transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        from PIL import Image

        a = self.pixels[index].numpy()
        img = Image.fromarray(a[0], mode="L") if a.shape[0] == 1 else Image.fromarray(a.transpose(1, 2, 0), "RGB")
        return self.transform(img), self.targets[index]


class SquareResize:
    """PIL image -> (size, size), bilinear with PIL's antialiasing; untouched when already that size."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img):
        from PIL import Image

        if img.size == (self.size, self.size):
            return img
        return img.resize((self.size, self.size), Image.Resampling.BILINEAR)


class NormalisedTensor:
    """PIL image -> float tensor (C, H, W), (pixel / 255 - mean) / std as one multiply-add per pixel in
    numpy, grey replicated up to `in_chans`. (torchvision's v2 PILToTensor + ToDtype + Normalize chain
    costs about 250 us per small image, this about 40 us: on two CPU cores, the difference between a
    loader that keeps up with a small model and one that does not.)"""

    def __init__(self, mean: Sequence[float], std: Sequence[float], in_chans: int | None):
        import numpy as np

        self.scale = (1.0 / (255.0 * np.asarray(std, dtype=np.float32))).astype(np.float32)
        self.offset = (np.asarray(mean, dtype=np.float32) / np.asarray(std, dtype=np.float32)).astype(np.float32)
        self.in_chans = in_chans

    def __call__(self, img) -> torch.Tensor:
        import numpy as np

        a = np.asarray(img, dtype=np.float32)
        if a.ndim == 2:  # grey (H, W): replicated to the model's channels, each normalised with its own
            c = self.in_chans or 1
            a = np.broadcast_to(a[..., None], (*a.shape, c))
        c = a.shape[2]
        if c > len(self.scale) and len(self.scale) != 1:
            raise BenchError(f"{c}-channel images and a mean/std of {len(self.scale)} channels")
        scale, offset = (self.scale[:c], self.offset[:c]) if len(self.scale) >= c else (self.scale, self.offset)
        x = torch.from_numpy(np.ascontiguousarray((a * scale - offset).transpose(2, 0, 1)))
        return match_channels(x, self.in_chans)


def photo_transform(options: DataOptions, native_size: int, *, mean: Sequence[float] = VIT_MEAN,
                    std: Sequence[float] = VIT_STD):
    """PIL image -> normalised float tensor (C, size, size).

    Evaluation (and features): `options.preprocessing` where the cell has one (`eval_transform`, at the
    model's size: `at_size`); else resize to a square of `size` without cropping, as the paper's code
    evaluates. Training with `augment`: an Inception-style random crop resized to `size`, and a random
    horizontal flip (torchvision's RandomResizedCrop, RandomHorizontalFlip), drawn from torch's global
    generator, which the training loader seeds per image (plugins/protocols/loader.py `SeededItems`);
    normalised with the cell's preprocessing's mean/std where it has one.
    """
    from torchvision.transforms import v2

    size = target_size(options, native_size)
    pre = options.preprocessing
    if pre is not None and not options.augment:
        return eval_transform(at_size(pre, size), options.in_chans)
    if pre is not None:
        mean, std = pre.mean, pre.std
    steps = ([v2.RandomResizedCrop((size, size), antialias=True), v2.RandomHorizontalFlip()] if options.augment
             else [SquareResize(size)])
    return v2.Compose([*steps, NormalisedTensor(mean, std, options.in_chans)])


def at_size(pre: Preprocessing, size: int) -> Preprocessing:
    """`pre` for a model that takes `size` px: the same crop_pct (timm's rule: resize side
    floor(size / crop_pct), from the crop_pct the config gave where `pre` keeps it), interpolation and
    mean/std; `pre` itself when it already crops `size`."""
    if pre.crop_size == size:
        return pre
    source = f"{pre.source}, at {size} px" if pre.source else f"at {size} px"
    if pre.given_crop_pct is None and pre.crop_size == pre.resize_size:
        return replace(pre, crop_size=size, resize_size=size)
    crop_pct = pre.given_crop_pct if pre.given_crop_pct is not None else config_crop_pct(pre)
    return Preprocessing.from_crop_pct(size, crop_pct, resize_mode=pre.resize_mode,
                                       interpolation=pre.interpolation, mean=pre.mean, std=pre.std, source=source)


def config_crop_pct(pre: Preprocessing) -> float:
    """The crop_pct a transform that names only its sides (torchvision's weights, transformers' configs)
    most likely stands for: the one of fewest decimals (2 to 4) whose resize side
    floor(crop_size / crop_pct) is `pre`'s (224 / 235 = 0.9532 is 0.95); else crop / resize."""
    exact = pre.crop_size / pre.resize_size
    for digits in (2, 3, 4):
        scale = 10 ** digits
        near = round(exact * scale)
        fits = [k / scale for k in (near - 1, near, near + 1)
                if 0 < k <= scale and math.floor(pre.crop_size / (k / scale)) == pre.resize_size]
        if fits:
            return min(fits, key=lambda c: abs(c - exact))
    return exact


def eval_transform(pre: Preprocessing, in_chans: int | None = None):
    """PIL image -> float tensor (C, crop, crop) as `pre` says: resize (shorter side to resize_size, or
    both sides: squash) with PIL's filter of that name (antialiased), centre crop (torchvision's:
    the offset rounded), then [0, 1] and (x - mean) / std in torch's float32 operations (those of
    ToTensor and Normalize), grey replicated up to `in_chans`."""
    from torchvision.transforms import InterpolationMode, v2

    size = pre.resize_size if pre.resize_mode == "shorter" else (pre.resize_size, pre.resize_size)
    return v2.Compose([v2.Resize(size, interpolation=InterpolationMode(pre.interpolation), antialias=True),
                       v2.CenterCrop(pre.crop_size), ExactNormalise(pre.mean, pre.std, in_chans)])


class ExactNormalise:
    """PIL image -> (pixel / 255 - mean) / std as float32 (C, H, W): torchvision's ToTensor + Normalize,
    operation for operation (so equal to theirs bit for bit), grey replicated up to `in_chans` first (as
    `Image.convert("RGB")` before their transform)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], in_chans: int | None):
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
        self.in_chans = in_chans

    def __call__(self, img) -> torch.Tensor:
        import numpy as np

        a = torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))
        x = (a[None] if a.ndim == 2 else a.permute(2, 0, 1)).contiguous().float().div(255)
        x = match_channels(x, self.in_chans)  # grey as RGB first: each channel takes its own mean/std
        c = x.shape[0]
        return x.sub_(self.mean[:c]).div_(self.std[:c])


def open_image(path: str, mode: str = "RGB"):
    """An image file as a PIL image in `mode` ("RGB" or "L"); picklable for DataLoader workers."""
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert(mode)
