"""Dataset plugins on tiny files in each dataset's real on-disk format; shared transforms and subsets."""

import numpy as np
import pytest

from benchbench.runtime.threads import Budget
import torch
import torchvision.datasets.cifar
from torch.utils.data import TensorDataset

from benchbench.errors import BenchError
from benchbench.specs import DataOptions
from benchbench_plugins.datasets import locate, transforms
from benchbench_plugins.protocols import loader, subsets
from benchbench_plugins.protocols.loader import Loader
from benchbench_plugins.datasets import cifar
from benchbench_plugins.datasets import flowers
from benchbench_plugins.datasets import imagefolder
from benchbench_plugins.datasets import imagenet
from benchbench_plugins.datasets import pets
from benchbench_plugins.datasets import synthetic


@pytest.fixture
def no_cache(tmp_path, monkeypatch):
    """Nothing from the user's download cache may be found."""
    monkeypatch.setattr(locate, "CACHE_DIR", tmp_path / "no-cache")


# --- transforms -------------------------------------------------------------------------------------------


def test_grey_is_replicated_exactly_to_three_channels():
    x = torch.rand(4, 1, 5, 5)
    y = transforms.match_channels(x, 3)
    assert y.shape == (4, 3, 5, 5) and all(torch.equal(y[:, c], x[:, 0]) for c in range(3))
    assert transforms.match_channels(x, 1) is x and transforms.match_channels(x, None) is x
    with pytest.raises(BenchError, match="only grey images are replicated"):
        transforms.match_channels(torch.rand(2, 3, 4, 4), 1)


def _bilinear_1d(v: np.ndarray, n: int) -> np.ndarray:
    """Upsampling by linear interpolation at pixel centres: output i samples input position
    (i + 0.5) * len(v) / n - 0.5, clamped to the edges (the half-pixel convention of PIL and TF2)."""
    pos = np.clip((np.arange(n) + 0.5) * len(v) / n - 0.5, 0, len(v) - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, len(v) - 1)
    return v[lo] * (1 - (pos - lo)) + v[hi] * (pos - lo)


def test_batch_resize_is_bilinear_at_pixel_centres():
    img = np.array([[0.0, 1.0, 4.0], [2.0, 3.0, 9.0], [5.0, 7.0, 8.0]])
    expect = np.stack([_bilinear_1d(r, 6) for r in img])  # rows, then columns (separable)
    expect = np.stack([_bilinear_1d(c, 6) for c in expect.T]).T
    out = transforms.BatchTransform(size=6)(torch.tensor(img, dtype=torch.float32)[None, None])
    assert out.shape == (1, 1, 6, 6)
    np.testing.assert_allclose(out[0, 0].numpy(), expect, atol=1e-6)


def test_uint8_batches_are_scaled_to_minus_one_one():
    x = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 1, 1, 3)
    out = transforms.BatchTransform(mean=(0.5,), std=(0.5,))(x)
    assert out.flatten().tolist() == pytest.approx([-1.0, 51 / 127.5 - 1, 1.0])


def test_fashion_mnist_honours_image_size_and_channels(tiny_data):
    from benchbench_plugins.datasets import fashion_mnist

    native = fashion_mnist.load("test", DataOptions(root=tiny_data, image_size=28, in_chans=1))
    assert native.transform is None  # the 28 px fast path: batches are plain slices
    big = fashion_mnist.load("test", DataOptions(root=tiny_data, image_size=56, in_chans=3))
    assert big.tensors[0].shape == (100, 1, 28, 28)  # stored once, transformed per batch
    (x, y), = list(Loader(big, batch_size=100))
    assert x.shape == (100, 3, 56, 56) and torch.equal(y, native.tensors[1])
    assert torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 1], x[:, 2])
    # A 2x bilinear upsampling keeps the mean of each image (up to the edges' clamping, none here).
    x1 = torch.nn.functional.interpolate(native.tensors[0], size=56, mode="bilinear", align_corners=False)
    assert torch.allclose(x[:, :1], x1, atol=1e-6)
    assert big[3][0].shape == (3, 56, 56) and torch.allclose(big[3][0], x[3], atol=1e-6)


# --- subsets --------------------------------------------------------------------------------------------


def test_per_class_subset_takes_exactly_n_per_class_seeded_and_nested():
    labels = torch.tensor([c for c in range(5) for _ in range(20)])
    idx = subsets.per_class_indices(labels, 3, seed=7)
    assert torch.bincount(labels[idx]).tolist() == [3] * 5
    assert torch.equal(idx, subsets.per_class_indices(labels, 3, seed=7))
    assert not torch.equal(idx, subsets.per_class_indices(labels, 3, seed=8))
    assert torch.equal(idx, torch.sort(idx).values)  # dataset order
    bigger = set(subsets.per_class_indices(labels, 10, seed=7).tolist())
    assert set(idx.tolist()) <= bigger  # the same seed's draws are nested
    # A class with fewer than n examples gives all of them.
    short = torch.tensor([0] * 10 + [1] * 2)
    assert torch.bincount(short[subsets.per_class_indices(short, 5, seed=0)]).tolist() == [5, 2]


def test_per_class_subset_keeps_the_fast_path_and_the_transform():
    ds = transforms.TensorImages(torch.zeros(40, 1, 4, 4), torch.arange(40) % 4, transforms.BatchTransform(size=8))
    sub = subsets.per_class_subset(ds, 2, seed=0)
    assert isinstance(sub, transforms.TensorImages) and sub.transform is ds.transform and len(sub) == 8
    assert subsets.per_class_subset(ds, 0, seed=0) is ds
    with pytest.raises(BenchError, match="at most one of train_per_class and train_subset"):
        subsets.training_subset(ds, per_class=2, total=10, seed=0)
    assert len(subsets.training_subset(ds, per_class=0, total=10, seed=0)) == 10


def test_labels_of_reads_torchvision_attributes_without_decoding():
    class Files(torch.utils.data.Dataset):
        targets = [2, 0, 1]

        def __len__(self):
            return 3

        def __getitem__(self, i):
            raise AssertionError("labels_of must not decode images")

    assert subsets.labels_of(Files()).tolist() == [2, 0, 1]
    assert subsets.labels_of(torch.utils.data.Subset(Files(), [2, 0])).tolist() == [1, 2]
    assert subsets.labels_of(TensorDataset(torch.zeros(2), torch.tensor([5, 6]))).tolist() == [5, 6]


# --- CIFAR ------------------------------------------------------------------------------------------------


@pytest.fixture
def cifar_md5_off(monkeypatch):
    """The tiny files cannot match the official archive's checksums, which torchvision verifies."""
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)


def test_cifar10_pickle_round_trip(tmp_path, datafiles, cifar_md5_off, no_cache):
    train, test = datafiles.cifar_images(10, seed=0), datafiles.cifar_images(4, seed=1)
    datafiles.write_cifar10(tmp_path, train, test)
    ds = cifar.load("cifar10", "train", DataOptions(root=tmp_path, image_size=32, in_chans=3))
    assert len(ds) == 10 and ds.tensors[1].tolist() == train[1]
    stored = ds.tensors[0]
    assert stored.dtype == torch.uint8 and torch.equal(stored, torch.from_numpy(train[0]).permute(0, 3, 1, 2))
    (x, _), = list(Loader(ds, batch_size=10))
    expect = torch.from_numpy(train[0]).permute(0, 3, 1, 2).float() / 127.5 - 1  # the ViT paper's scaling
    assert torch.allclose(x, expect, atol=1e-6)
    t = cifar.load("cifar10", "test", DataOptions(root=tmp_path))
    assert t.tensors[1].tolist() == test[1] and t[0][0].shape == (3, 32, 32)


def test_cifar100_fine_labels_and_resize(tmp_path, datafiles, cifar_md5_off, no_cache):
    images, _ = datafiles.cifar_images(6, seed=2)
    labels = [0, 99, 42, 7, 7, 63]
    datafiles.write_cifar100(tmp_path / "cifar100", (images, labels), (images[:2], labels[:2]))
    ds = cifar.load("cifar100", "train", DataOptions(root=tmp_path, image_size=64, in_chans=3))
    assert ds.tensors[1].tolist() == labels
    (x, _), = list(Loader(ds, batch_size=6))
    assert x.shape == (6, 3, 64, 64)


def test_cifar_missing_says_where_and_how(tmp_path, no_cache):
    with pytest.raises(BenchError) as err:
        cifar.load("cifar10", "train", DataOptions(root=tmp_path / "empty"))
    msg = str(err.value)
    for hint in (str(tmp_path / "empty"), "cifar-10-batches-py", "--data-root DIR", "BENCHBENCH_DATA", "--download"):
        assert hint in msg


# --- Oxford-IIIT Pet ---------------------------------------------------------------------------------------


def test_pets_trainval_and_test_layout(tmp_path, datafiles, no_cache):
    datafiles.write_pets(tmp_path, {"trainval": 6, "test": 3})
    ds = pets.load("train", DataOptions(root=tmp_path, image_size=32, in_chans=3))
    assert len(ds) == 6 and subsets.labels_of(ds).tolist() == [0, 1, 2, 0, 1, 2]
    x, y = ds[1]
    assert x.shape == (3, 32, 32) and y == 1
    # A solid JPEG colour survives compression within a few levels; scaled to [-1, 1].
    assert torch.allclose(x[:, 16, 16], torch.tensor([20, 100, 200]) / 127.5 - 1, atol=0.05)
    assert len(pets.load("test", DataOptions(root=tmp_path, image_size=32))) == 3


def test_pets_missing(tmp_path, no_cache):
    with pytest.raises(BenchError, match="oxford-iiit-pet/images"):
        pets.load("test", DataOptions(root=tmp_path))


# --- Flowers-102 -------------------------------------------------------------------------------------------


def test_mat_reader_reads_matlab_v5_numeric_arrays(tmp_path, datafiles):
    a = np.array([[1.5, 2.0, -3.0], [4.0, 5.0, 6.25]])
    datafiles.write_mat(tmp_path / "plain.mat", {"a": a, "ids": np.array([[7, 8, 9, 10]])})
    got = flowers.read_mat(tmp_path / "plain.mat")
    np.testing.assert_array_equal(got["a"], a)  # column-major storage, read back in MATLAB's shape
    np.testing.assert_array_equal(got["ids"], [[7, 8, 9, 10]])
    datafiles.write_mat(tmp_path / "packed.mat", {"labels": np.array([[1, 102, 77]])}, compress=True,
                        stored_as=datafiles.MI_UINT16)
    got = flowers.read_mat(tmp_path / "packed.mat")["labels"]
    assert got.dtype == np.float64 and got.tolist() == [[1.0, 102.0, 77.0]]
    (tmp_path / "bad.mat").write_bytes(b"\x89HDF" + b"\0" * 200)
    with pytest.raises(BenchError, match="not a MATLAB v5"):
        flowers.read_mat(tmp_path / "bad.mat")


def test_flowers_train_is_trnid_plus_valid(tmp_path, datafiles, no_cache):
    labels = [1, 2, 3, 102, 5, 6, 7]  # image k has label labels[k - 1], 1-based
    datafiles.write_flowers(tmp_path, labels, trnid=[1, 2], valid=[4], tstid=[3, 5, 6, 7])
    train = flowers.load("train", DataOptions(root=tmp_path, image_size=16, in_chans=3))
    assert train.targets == [0, 1, 101] and [f[-15:] for f in train.files] == [
        "image_00001.jpg", "image_00002.jpg", "image_00004.jpg"]
    x, y = train[2]
    assert x.shape == (3, 16, 16) and y == 101
    test = flowers.load("test", DataOptions(root=tmp_path, image_size=16))
    assert test.targets == [2, 4, 5, 6]


def test_flowers_missing(tmp_path, no_cache):
    with pytest.raises(BenchError, match="imagelabels.mat"):
        flowers.load("train", DataOptions(root=tmp_path))


# --- ImageNet ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def imagenet_root(tmp_path_factory, datafiles):
    """1000 wnid folders of one 8x8 PNG each in train/ and val/, pixel = class index mod 256."""
    root = tmp_path_factory.mktemp("imagenet-data") / "imagenet"
    from benchbench.weights.classmap import IMAGENET_1K

    wnids = IMAGENET_1K
    for split in ("train", "val"):
        for i, w in enumerate(wnids):
            d = root / split / w
            d.mkdir(parents=True)
            datafiles.solid((i % 256, 0, 0), size=(8, 8)).save(d / f"{w}_{split}.png")
    return root


def test_imagenet_class_folders(imagenet_root, no_cache):
    options = DataOptions(root=imagenet_root.parent, image_size=8, in_chans=3)
    train, val = imagenet.load("train", options), imagenet.load("test", options)
    assert len(train) == len(val) == 1000
    assert subsets.labels_of(val).tolist() == list(range(1000))  # sorted wnids, the same in both splits
    x, y = val[300]
    assert y == 300 and torch.allclose(x[0], torch.full((8, 8), 300 % 256 / 127.5 - 1), atol=1e-6)


def test_imagenet_wrong_layouts(tmp_path, datafiles, no_cache):
    datafiles.write_class_folders(tmp_path / "imagenet", {"train": {"n1": [datafiles.solid(0, (4, 4))]},
                                                          "val": {}})
    (tmp_path / "imagenet" / "val").mkdir(exist_ok=True)
    with pytest.raises(BenchError, match="1 class folders, expected ILSVRC-2012's 1000 wnids.*not ImageNet wnids: n1"):
        imagenet.load("train", DataOptions(root=tmp_path))
    with pytest.raises(BenchError, match="val has no class folders"):
        imagenet.load("test", DataOptions(root=tmp_path))
    with pytest.raises(BenchError) as err:
        imagenet.load("train", DataOptions(root=tmp_path / "nothing"))
    assert "no automatic download" in str(err.value) and "train/<wnid>" in str(err.value)


def test_imagenet_evaluation_needs_only_val(tmp_path, datafiles, no_cache):
    """Evaluating a checkpoint reads val/ alone: most people who evaluate have no copy of the 1.28M
    training images."""
    from benchbench.weights.classmap import IMAGENET_1K

    datafiles.write_class_folders(tmp_path / "imagenet", {"val": {w: [datafiles.solid(1, (4, 4))] for w in IMAGENET_1K}})
    imagenet.available("test", DataOptions(root=tmp_path))
    assert len(imagenet.load("test", DataOptions(root=tmp_path, image_size=4))) == 1000
    with pytest.raises(BenchError, match="no train/ class folders"):
        imagenet.available("train", DataOptions(root=tmp_path))


# --- imagefolder:<path> ---------------------------------------------------------------------------------------


def _grey_folder(datafiles, root):
    grey = lambda v: datafiles.solid(v, size=(12, 12), mode="L")  # noqa: E731
    return datafiles.write_class_folders(root, {"train": {"cat": [grey(10), grey(20)], "dog": [grey(30)],
                                                          "emu": [grey(40)]},
                                                "val": {"cat": [grey(50)], "emu": [grey(60)]}})


def test_imagefolder_binds_through_the_registry(tmp_path, catalog, datafiles):
    root = _grey_folder(datafiles, tmp_path / "MyData")
    name = f"ImageFolder:{root}"
    assert name in catalog.datasets
    spec_id = catalog.datasets.resolve(name)
    assert spec_id == f"imagefolder:{root}"  # the path keeps its case
    spec = catalog.datasets.get(spec_id)
    assert (spec.num_classes, spec.image_size, spec.in_chans) == (3, 12, 1)
    assert catalog.datasets.plugin_of[spec.id] == "benchbench_plugins.datasets.imagefolder"
    assert catalog.datasets.get(name) is spec  # bound once
    train = spec.load("train", DataOptions(image_size=12, in_chans=1))
    assert subsets.labels_of(train).tolist() == [0, 0, 1, 2]
    x, _ = train[1]
    assert x.shape == (1, 12, 12) and torch.allclose(x, torch.full((1, 12, 12), 20 / 127.5 - 1), atol=1e-6)
    # val/ is the test split; it lacks "dog" and keeps the training split's numbering.
    test = spec.load("test", DataOptions(image_size=12, in_chans=3))
    assert subsets.labels_of(test).tolist() == [0, 2]
    x, _ = test[1]
    assert x.shape == (3, 12, 12) and torch.equal(x[0], x[1]) and torch.equal(x[1], x[2])


def test_imagefolder_errors(tmp_path, catalog, datafiles):
    with pytest.raises(BenchError, match="no such folder"):
        catalog.datasets.resolve(f"imagefolder:{tmp_path / 'missing'}")
    (tmp_path / "empty" / "train").mkdir(parents=True)
    with pytest.raises(BenchError, match="no class folders"):
        catalog.datasets.resolve(f"imagefolder:{tmp_path / 'empty'}")
    with pytest.raises(BenchError, match="takes an argument"):
        catalog.datasets.resolve("imagefolder")
    root = datafiles.write_class_folders(tmp_path / "rgb", {"train": {"a": [datafiles.solid((1, 2, 3), (20, 10))]},
                                                            "test": {"b": [datafiles.solid((1, 2, 3), (20, 10))]}})
    spec = catalog.datasets.get(f"imagefolder:{root}")
    assert (spec.image_size, spec.in_chans) == (imagefolder.DEFAULT_SIZE, 3)  # not square: 224
    with pytest.raises(BenchError, match="class folders the training split lacks: b"):
        spec.load("test", DataOptions())


def test_imagefolder_in_a_suite(tmp_path, catalog, datafiles):
    from benchbench.plan.suite import load_suite

    root = _grey_folder(datafiles, tmp_path / "d")
    suite = tmp_path / "s.toml"
    suite.write_text(f'[suite]\nmodels = ["vit-mu4"]\ndatasets = ["imagefolder:{root}"]\nprotocols = ["scratch"]\n')
    (cell,) = load_suite(str(suite), catalog).cells
    assert cell.dataset == f"imagefolder:{root}"


# --- synthetic and every registered dataset ---------------------------------------------------------------------


def test_synthetic_is_deterministic_per_index():
    a = synthetic.load("train", DataOptions(image_size=16, in_chans=3))
    b = synthetic.load("train", DataOptions(image_size=16, in_chans=3))
    assert len(a) == synthetic.SIZES["train"]
    x, y = a[12345]
    assert x.shape == (3, 16, 16) and y == 5 and torch.equal(x, b[12345][0])
    assert not torch.equal(a[0][0], synthetic.load("test", DataOptions(image_size=16))[0][0])
    assert synthetic.load("test", DataOptions(image_size=28, in_chans=1))[0][0].shape == (1, 28, 28)


def test_every_dataset_declares_the_protocols_splits(catalog):
    for spec in catalog.datasets:
        if spec.bind is not None or spec.id == "jft-300m":
            continue
        if spec.splits == ("test",):  # an evaluation set (ImageNet-V2, -R, ...): tests/test_imagenet_sets.py
            assert spec.class_ids is not None and "test" in spec.num_examples, spec.id
            continue
        assert {"train", "test"} <= set(spec.splits), spec.id
        assert set(spec.num_examples) >= {"train", "test"}, spec.id
        assert spec.num_classes > 0 and spec.image_size > 0 and spec.in_chans in (1, 3), spec.id


def test_auto_workers(monkeypatch):
    assert loader.auto_workers(TensorDataset(torch.zeros(1))) == 0
    files = synthetic.load("test", DataOptions(image_size=8))
    for cpus, expect in ((1, 0), (2, 0), (4, 2), (16, 4)):
        monkeypatch.setattr(loader, "budget", lambda n=cpus: Budget(n, f"affinity: {n} CPUs"))
        assert loader.auto_workers(files) == expect


def test_missing_data_messages_name_download_only_where_it_exists(tmp_path, no_cache):
    err = locate.missing_data("x", "files", [tmp_path], "DIR/x/", download=None)
    assert "no automatic download" in str(err) and "--download" not in str(err)
