import numpy as np
import pytest
import torch

from benchbench.errors import BenchError
from benchbench.specs import DataOptions
from benchbench_plugins.datasets import fashion_mnist


def test_loads_idx_files_from_data_root(tiny_data):
    ds = fashion_mnist.load("train", DataOptions(root=tiny_data))
    x, y = ds.tensors
    assert x.shape == (300, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) <= 9
    # Normalisation: pixel p -> (p / 255 - mean) / std
    raw = fashion_mnist.read_idx(tiny_data / "fashion-mnist" / "train-images-idx3-ubyte.gz")
    expect = (raw[0, 0, 0] / 255 - fashion_mnist.MEAN) / fashion_mnist.STD
    assert float(x[0, 0, 0, 0]) == pytest.approx(expect, abs=1e-6)
    assert len(fashion_mnist.load("test", DataOptions(root=tiny_data))) == 100


def test_uncompressed_files_and_flat_root(tmp_path, idx):
    idx.write_fashion_mnist(tmp_path, n_train=20, n_test=10, gz=False)
    ds = fashion_mnist.load("test", DataOptions(root=tmp_path / "fashion-mnist"))
    assert len(ds) == 10


def test_missing_files_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "not-installed")
    with pytest.raises(BenchError) as err:
        fashion_mnist.load("train", DataOptions(root=tmp_path / "empty"))
    msg = str(err.value)
    for hint in ("apt-get install dataset-fashion-mnist", "--data-root DIR", "BENCHBENCH_DATA", "--download",
                 "train-images-idx3-ubyte", str(tmp_path / "empty")):
        assert hint in msg


def test_label_count_mismatch_is_an_error(tiny_data, idx):
    idx.write_idx(tiny_data / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz", np.zeros(99, dtype=np.uint8))
    with pytest.raises(BenchError, match="99 labels for 100 images"):
        fashion_mnist.load("test", DataOptions(root=tiny_data))


def test_unknown_split(tiny_data):
    with pytest.raises(BenchError, match="allowed: train, test"):
        fashion_mnist.load("val", DataOptions(root=tiny_data))


def test_real_files_are_the_official_split(real_fashion_mnist):
    train = fashion_mnist.load("train", DataOptions())
    test = fashion_mnist.load("test", DataOptions())
    assert len(train) == 60_000 and len(test) == 10_000
    # Balanced classes: 6,000 / 1,000 per class in the official split.
    assert torch.bincount(train.tensors[1]).tolist() == [6000] * 10
    assert torch.bincount(test.tensors[1]).tolist() == [1000] * 10
    # The published training-set statistics used for normalisation.
    assert float(train.tensors[0].mean()) == pytest.approx(0.0, abs=1e-3)
    assert float(train.tensors[0].std()) == pytest.approx(1.0, abs=1e-3)
