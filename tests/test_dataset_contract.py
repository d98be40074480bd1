"""Every registered dataset plugin keeps the contract the protocols rely on: given a made sample in its
published layout, `available` passes for each split and `load` gives a map-style dataset of
(float CHW image with the spec's channels, integer label below num_classes); without its files,
`available` and `load` both raise the BenchError that says how to provide them. A dataset added
without a sample maker here fails the first test, so the contract covers every plugin."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torchvision

from benchbench.errors import BenchError
from benchbench.specs import DataOptions


def _fashion(root, datafiles):
    datafiles.idx.write_fashion_mnist(root, n_train=20, n_test=10)
    return root


def _cifar(dataset_id):
    def make(root, datafiles):
        train, test = datafiles.cifar_images(6, seed=0), datafiles.cifar_images(3, seed=1)
        (datafiles.write_cifar10 if dataset_id == "cifar10" else datafiles.write_cifar100)(
            root if dataset_id == "cifar10" else root / "cifar100", train, test)
        return root
    return make


def _pets(root, datafiles):
    datafiles.write_pets(root, {"trainval": 3, "test": 3})
    return root


def _flowers(root, datafiles):
    datafiles.write_flowers(root, [1, 2, 3, 4], trnid=[1], valid=[2], tstid=[3, 4])
    return root


def _imagenet(root, datafiles):
    image = datafiles.solid((10, 20, 30), size=(8, 8))
    from benchbench.weights.classmap import IMAGENET_1K

    classes = {wnid: [image] for wnid in IMAGENET_1K}
    datafiles.write_class_folders(root / "imagenet", {"train": classes, "val": classes})
    return root


def _one_jpeg_each(root, folders, ext, name=lambda i: f"img{i}"):
    """One real JPEG (encoded once) in each of `folders` under root."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (12, 10), (200, 100, 0)).save(buf, format="JPEG")
    for i, folder in enumerate(folders):
        (root / folder).mkdir(parents=True)
        (root / folder / f"{name(i)}.{ext}").write_bytes(buf.getvalue())


def _v2(variant):
    def make(root, datafiles):
        _one_jpeg_each(root / f"imagenetv2-{variant}-format-val", [str(i) for i in range(1000)], "jpeg")
        return root
    return make


def _subset(folder, wnids_of):
    def make(root, datafiles):
        from benchbench_plugins.datasets.evalsets import subset_wnids

        _one_jpeg_each(root / folder, subset_wnids(wnids_of), "jpg")
        return root
    return make


def _sketch(root, datafiles):
    from benchbench.weights.classmap import IMAGENET_1K

    _one_jpeg_each(root / "sketch", IMAGENET_1K, "JPEG")
    return root


def _real(root, datafiles):
    import json

    from benchbench.weights.classmap import IMAGENET_1K

    _one_jpeg_each(root / "imagenet" / "val", IMAGENET_1K, "JPEG", name=lambda i: f"ILSVRC2012_val_{i + 1:08d}")
    (root / "imagenet" / "real.json").write_text(json.dumps([[i % 1000] for i in range(50_000)]))
    return root


# id -> writes a sample under a folder and returns the data root to pass; None: needs no files
MAKERS = {
    "fashion-mnist": _fashion, "cifar10": _cifar("cifar10"), "cifar100": _cifar("cifar100"),
    "oxford-iiit-pets": _pets, "flowers102": _flowers, "imagenet": _imagenet, "digits": None, "synthetic": None,
    "imagenet-v2": _v2("matched-frequency"), "imagenet-v2-threshold0.7": _v2("threshold0.7"),
    "imagenet-v2-top-images": _v2("top-images"), "imagenet-r": _subset("imagenet-r", "imagenet_r"),
    "imagenet-a": _subset("imagenet-a", "imagenet_a"), "imagenet-sketch": _sketch, "imagenet-real": _real,
}
# Registered, but with nothing to load: their own tests cover them.
NOT_LOADABLE = {"jft-300m": "Google-internal: refused with a message", "imagefolder": "parametric: imagefolder:<path>"}


@pytest.fixture
def no_installed_copies(tmp_path, monkeypatch):
    """Only the test's folders: no download cache, no Debian copy, no checksum of the official archives."""
    from benchbench_plugins.datasets import fashion_mnist, locate

    monkeypatch.setattr(locate, "CACHE_DIR", tmp_path / "no-cache")
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "not-installed")
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)


def test_every_registered_dataset_has_a_sample_here(catalog):
    ids = set(catalog.datasets.specs)
    assert ids - set(MAKERS) - set(NOT_LOADABLE) == set(), "add a sample maker for the new dataset plugin"


@pytest.mark.parametrize("dataset_id", sorted(MAKERS))
def test_a_made_sample_loads_through_the_plugin(dataset_id, catalog, datafiles, idx, tmp_path, no_installed_copies):
    spec = catalog.datasets.get(dataset_id)
    make = MAKERS[dataset_id]
    root = make(tmp_path / "data", SimpleNamespace(**vars(datafiles), idx=idx)) if make else None
    options = DataOptions(root=root, image_size=spec.image_size, in_chans=spec.in_chans)
    for split in spec.splits:
        if spec.available is not None:
            spec.available(split, options)
        ds = spec.load(split, options)
        assert len(ds) > 0
        for i in (0, len(ds) - 1):
            x, y = ds[i]
            assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.ndim == 3
            assert x.shape[0] == spec.in_chans and torch.isfinite(x).all()
            assert isinstance(int(y), int) and 0 <= int(y) < spec.num_classes
            assert not isinstance(y, (float, np.floating))


@pytest.mark.parametrize("dataset_id", sorted(d for d, make in MAKERS.items() if make))
def test_without_its_files_the_plugin_says_how_to_provide_them(dataset_id, catalog, tmp_path, no_installed_copies):
    spec = catalog.datasets.get(dataset_id)
    options = DataOptions(root=tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    assert spec.available is not None, "a dataset read from files checks them before a run (DatasetSpec.available)"
    split = spec.splits[-1]
    with pytest.raises(BenchError) as checked:
        spec.available(split, options)
    with pytest.raises(BenchError) as loaded:
        spec.load(split, options)
    assert str(tmp_path / "empty") in str(checked.value) and "--data-root" in str(checked.value)
    assert str(checked.value) == str(loaded.value)
