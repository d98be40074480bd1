"""The full default suite on real data: the numbers README publishes must hold."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("real_fashion_mnist")]


def test_quickstart_reaches_published_small_cnn_accuracy(run_suite):
    run_suite.data = None  # the installed dataset, found by itself
    proc = run_suite.cli(*run_suite.argv(suite="quickstart"), timeout=1800)
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (run_suite.results / "quickstart").iterdir()
    records = {r.model: r for r in run_suite.records(run_dir)}
    cnn, vit = records["bit-r20x1-small"].metrics, records["vit-mu7"].metrics
    # Fashion-MNIST's published two-conv CNN baselines are about 0.88-0.90 top-1 (the benchmark
    # table of zalandoresearch/fashion-mnist); one epoch from scratch must reach that range.
    # (Measured: 0.8857 with seed 0 on 2 CPU cores.)
    assert cnn["top1"] >= 0.88
    # The small ViT is reported honestly beside it; it must at least have learnt the task.
    assert vit["top1"] >= 0.80
    assert cnn["eval_images"] == vit["eval_images"] == 10_000
    assert cnn["train_images_seen"] == vit["train_images_seen"] == 60_000
