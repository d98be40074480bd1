"""Few-shot linear evaluation: the closed-form solver against numpy, the draws, and a run end to end."""

import numpy as np
import pytest
import torch

from benchbench.errors import BenchError
from benchbench_plugins.protocols.features import (BIAS_FEATURE, Features, RidgeRegression, Whitening, fewshot_eval, shot_draws,
                                 signed_one_hot)
from benchbench.settings import resolve


def _lstsq_ridge(x: np.ndarray, y: np.ndarray, k: int, l2: float) -> np.ndarray:
    """Ridge by numpy's least squares on the augmented system [A; sqrt(l2) I] w = [T; 0], where A is
    the whitened features with the bias feature and T the {-1, 1} one-hot targets."""
    a = (x - x.mean(0)) / (x.std(0) + 1e-5)
    a = np.hstack([a, np.full((len(a), 1), BIAS_FEATURE)])
    t = 2.0 * np.eye(k)[y] - 1.0
    aug_a = np.vstack([a, np.sqrt(l2) * np.eye(a.shape[1])])
    aug_t = np.vstack([t, np.zeros((a.shape[1], k))])
    return np.linalg.lstsq(aug_a, aug_t, rcond=None)[0]


@pytest.mark.parametrize("n", [40, 6])  # more examples than dimensions (X^T X branch), and fewer (X X^T)
def test_ridge_matches_numpy_lstsq(n):
    rng = np.random.default_rng(n)
    x, y = rng.normal(size=(n, 9)) * 3 + 1, rng.integers(0, 4, size=n)
    solver = RidgeRegression(torch.tensor(x, dtype=torch.float32), torch.tensor(y), 4)
    for l2 in (1e-3, 1.0, 1024.0):
        expect = _lstsq_ridge(x.astype(np.float32).astype(np.float64), y, 4, l2)
        np.testing.assert_allclose(solver.weights(l2).numpy(), expect, rtol=1e-7, atol=1e-9)


def test_ridge_matches_the_normal_equations_on_test_points():
    rng = np.random.default_rng(1)
    x, y, xt = rng.normal(size=(30, 5)), rng.integers(0, 3, size=30), rng.normal(size=(7, 5))
    whiten = Whitening(torch.tensor(x))
    a = whiten(torch.tensor(x)).numpy()
    t = signed_one_hot(torch.tensor(y), 3).numpy()
    weights = np.linalg.solve(a.T @ a + 5.0 * np.eye(6), a.T @ t)  # (A^T A + l2 I) W = A^T T
    scores = RidgeRegression(torch.tensor(x), torch.tensor(y), 3).scores(torch.tensor(xt), 5.0)
    np.testing.assert_allclose(scores.numpy(), whiten(torch.tensor(xt)).numpy() @ weights, rtol=1e-9)
    assert whiten(torch.tensor(xt))[:, -1].eq(BIAS_FEATURE).all()


def test_separable_classes_give_100_percent():
    # Each class a tight cluster around its own corner: a linear classifier separates them perfectly.
    gen = torch.Generator().manual_seed(0)
    centres = torch.eye(6) * 10
    y = torch.arange(600) % 6
    x = centres[y] + 0.1 * torch.randn(600, 6, generator=gen)
    train, test = Features(x[:300], y[:300], 0.0), Features(x[300:], y[300:], 0.0)
    draws = shot_draws(train.y, 6, [1, 5], seeds=3, seed=0)
    result = fewshot_eval(train, test, 6, draws, l2=1.0)
    assert result.top1 == {1: [1.0] * 3, 5: [1.0] * 3}


def test_shot_draws_are_seeded_nested_and_balanced():
    labels = torch.arange(200) % 4
    draws = shot_draws(labels, 4, [1, 5, 25], seeds=3, seed=7)
    assert len(draws) == 3
    for draw in draws:
        for k, idx in draw.items():
            assert np.bincount(labels.numpy()[idx], minlength=4).tolist() == [k] * 4
        assert set(draw[1]) <= set(draw[5]) <= set(draw[25])  # as big_vision: one permutation per class
    assert not np.array_equal(draws[0][5], draws[1][5])
    again = shot_draws(labels, 4, [1, 5, 25], seeds=3, seed=7)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(draws, again) for k in (1, 5, 25))
    with pytest.raises(ValueError, match="class 3 has 2 training examples, fewer than the 5"):
        shot_draws(torch.tensor([0] * 9 + [1] * 9 + [2] * 9 + [3] * 2), 4, [1, 5], seeds=1, seed=0)


def test_settings_are_validated(catalog):
    fewshot = catalog.protocols.get("fewshot")
    assert resolve(fewshot, {}, "s")["shots"] == [1, 5, 10, 25]
    for given, message in (({"shots": [0, 5]}, "each k must be in 1..10000"), ({"shots": [5, 5]}, "without repeats"),
                           ({"shots": "5"}, "expected list"), ({"shots": [1.5]}, "list of integers"),
                           ({"seeds": 0}, "must be in 1..100"), ({"l2_reg": -1.0}, "must be > 0"),
                           ({"init": "model.ckpt"}, ".safetensors, .pt, .pth, .bin, .npz file, hf-hub:"), ({"k": 5}, "unknown fewshot setting 'k'"),
                           ({"precision": "fp4"}, "allowed: auto, fp32, tf32, bf16, fp16")):
        with pytest.raises(BenchError, match=message):
            resolve(fewshot, given, "s")


@pytest.mark.parametrize("protocol", ["fewshot", "linear"])
def test_a_frozen_backbones_protocol_refuses_fp8_which_is_float8_training(catalog, protocol):
    """fp8 is torchao's float8 training; few-shot and linear only run the backbone forward."""
    spec = catalog.protocols.get(protocol)
    with pytest.raises(BenchError, match="'fp8' is torchao's float8 training .* use bf16 for inference"):
        resolve(spec, {"precision": "fp8"}, "s")
    assert resolve(spec, {"precision": "bf16"}, "s")["precision"] == "bf16"
    assert resolve(catalog.protocols.get("scratch"), {"precision": "fp8"}, "s")["precision"] == "fp8"


def test_fewshot_end_to_end(run_suite, capsys):
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["fewshot"]
        [settings.fewshot]
        shots = [1, 5, 10]
        seeds = 3
        batch_size = 64
    """, "fs.toml")
    assert run_suite.run() == 0, capsys.readouterr().err
    assert run_suite.run_dir.parent.name == "fs"
    (record,) = run_suite.records()
    m = record.metrics
    assert record.status == "ok"
    for k in (1, 5, 10):
        assert 0 <= m[f"fewshot_{k}shot_top1"] <= 1 and m[f"fewshot_{k}shot_top1_std"] >= 0
    assert m["top1"] == m["fewshot_10shot_top1"]
    assert m["eval_images"] == 100
    # on the CPU features are extracted at exactly batch_size (inference.eval_batch_sizes)
    assert m["eval_batch_size_used"] == m["train_features_batch_size_used"] == 64
    # Features only of the drawn training images: 3 draws of 10 per class, nested, 10 classes.
    assert 100 <= m["features_images"] - 100 <= 300
    assert m["features_device_seconds"] > 0 and m["fewshot_solve_seconds"] > 0
    # The tiny data is learnable (a bright band per class): even random ViT features separate it.
    assert m["fewshot_10shot_top1"] > 0.5
