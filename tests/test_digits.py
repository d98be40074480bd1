"""Dataset `digits`: sklearn's bundled UCI digits with our seeded 1,297/500 split."""

import numpy as np
import pytest
import torch

from benchbench.errors import BenchError
from benchbench.specs import DataOptions
from benchbench_plugins.datasets import digits
from sklearn import datasets as sklearn_datasets




def test_split_sizes_per_class_and_no_overlap():
    labels = sklearn_datasets.load_digits().target
    train, test = digits.split_indices("train", labels), digits.split_indices("test", labels)
    assert len(train) == 1297 and len(test) == 500 and len(labels) == 1797
    assert not set(train.tolist()) & set(test.tolist())
    assert sorted(train.tolist() + test.tolist()) == list(range(1797))
    assert np.bincount(labels[test]).tolist() == [50] * 10
    assert (np.bincount(labels[train]) == np.bincount(labels) - 50).all()
    loaded = {s: digits.load(s, DataOptions()) for s in ("train", "test")}
    assert {s: len(d) for s, d in loaded.items()} == digits.SPLIT_SIZES
    assert torch.bincount(loaded["test"].tensors[1]).tolist() == [50] * 10


def test_split_is_deterministic_and_seeded():
    labels = sklearn_datasets.load_digits().target
    a, b = digits.test_indices(labels), digits.test_indices(labels)
    assert np.array_equal(a, b)
    # Recomputed independently: 50 per class from one default_rng(0), classes in turn.
    rng = np.random.default_rng(0)
    expect = np.sort(np.concatenate([rng.permutation(np.flatnonzero(labels == k))[:50] for k in range(10)]))
    assert np.array_equal(a, expect)


def test_pixels_match_sklearn_and_training_statistics():
    d = sklearn_datasets.load_digits()
    train = digits.load("train", DataOptions())
    x, y = train.tensors
    idx = digits.split_indices("train", d.target)
    assert x.shape == (1297, 1, 8, 8) and x.dtype == torch.float32
    assert np.array_equal(y.numpy(), d.target[idx])
    back = (x.numpy()[:, 0] * digits.STD + digits.MEAN) * 16
    np.testing.assert_allclose(back, d.images[idx], atol=1e-4)
    # The stored constants are the training split's own mean and std (of value / 16).
    scaled = d.images[idx] / 16
    assert digits.MEAN == pytest.approx(scaled.mean(), abs=1e-5)
    assert digits.STD == pytest.approx(scaled.std(), abs=1e-5)


def test_resized_to_the_models_resolution_and_channels():
    ds = digits.load("test", DataOptions(image_size=28, in_chans=3))
    x, _ = ds[0]
    assert x.shape == (3, 28, 28)


def test_unknown_split():
    with pytest.raises(BenchError, match="allowed: train, test"):
        digits.load("val", DataOptions())
