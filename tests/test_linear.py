"""Linear probe on frozen features: the L-BFGS logistic regression at its optimum, and a run end to end."""

import pytest
import torch
import torch.nn.functional as F

from benchbench.errors import BenchError
from benchbench_plugins.protocols.features import Whitening, logistic_regression, top1, topk
from benchbench.settings import resolve


def test_logistic_regression_reaches_its_optimum():
    # Overlapping classes, so the optimum is finite; at it the gradient of the objective vanishes.
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(300) % 3
    x = torch.eye(3)[y] * 1.5 + torch.randn(300, 3, generator=gen)
    whiten, w = logistic_regression(x, y, 3, l2=2.0, max_iter=200)
    a = whiten(x)[:, :-1]
    w, b = w[:-1].clone().requires_grad_(True), (w[-1] * 100).clone().requires_grad_(True)
    loss = F.cross_entropy(a @ w + b, y, reduction="sum") + 2.0 * w.pow(2).sum()  # the bias is not penalised
    grads = torch.autograd.grad(loss, (w, b))
    assert max(float(g.abs().max()) for g in grads) < 1e-6
    assert 0.6 < top1(whiten(x) @ torch.cat([w, b[None] / 100]).detach(), y) < 1.0


def test_separable_classes_give_100_percent():
    gen = torch.Generator().manual_seed(1)
    y = torch.arange(400) % 4
    x = torch.eye(4)[y] * 10 + 0.1 * torch.randn(400, 4, generator=gen)
    whiten, w = logistic_regression(x[:200], y[:200], 4, l2=1.0, max_iter=100)
    assert top1(whiten(x[200:]) @ w, y[200:]) == 1.0
    assert isinstance(whiten, Whitening)


def test_topk():
    scores = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    assert top1(scores, torch.tensor([0, 1])) == 0.5
    assert topk(scores, torch.tensor([1, 0]), 2) == 0.5 and topk(scores, torch.tensor([1, 0]), 5) == 1.0


def test_settings_are_validated(catalog):
    linear = catalog.protocols.get("linear")
    assert resolve(linear, {}, "s")["method"] == "ridge"
    for given, message in (({"method": "svm"}, "allowed: ridge, logistic"), ({"max_iter": 0}, "must be in"),
                           ({"l2_reg": 0}, "must be > 0"), ({"train_per_class": -1}, "must be >= 0"),
                           ({"num_workers": -2}, "must be >= -1"), ({"max_iter": 1.5}, "expected int")):
        with pytest.raises(BenchError, match=message):
            resolve(linear, given, "s")


@pytest.mark.parametrize("method", ["ridge", "logistic"])
def test_linear_end_to_end(run_suite, capsys, method):
    run_suite.write(f"""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["linear"]
        [settings.linear]
        method = "{method}"
        train_per_class = 20
        max_iter = 50
    """, "lin.toml")
    assert run_suite.run() == 0, capsys.readouterr().err
    assert run_suite.run_dir.parent.name == "lin"
    (record,) = run_suite.records()
    m = record.metrics
    assert record.status == "ok" and m["linear_train_images"] == 200 and m["eval_images"] == 100
    assert m["features_images"] == 300 and m["linear_solve_seconds"] > 0
    assert m["eval_batch_size_used"] == m["train_features_batch_size_used"] == 256  # the CPU: batch_size
    assert m["top1"] <= m["top5"] and m["top1"] > 0.5  # the tiny data's bands are linearly separable
