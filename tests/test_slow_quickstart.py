"""The full default suite on real data: the numbers README publishes must hold."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, real_fashion_mnist

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not real_fashion_mnist(), reason="dataset-fashion-mnist is not installed")]


def test_quickstart_reaches_published_small_cnn_accuracy(tmp_path):
    exe = Path(sys.executable).with_name("benchbench")
    proc = subprocess.run([str(exe), "run", "quickstart", "--results", str(tmp_path), "--no-progress",
                           "--device", "cpu"], capture_output=True, text=True, cwd=REPO, timeout=1800,
                          env={**os.environ, "BENCHBENCH_LOAD_ENTRY_POINTS": "0"})
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    records = {r["model"]: r for r in map(json.loads, (run_dir / "records.jsonl").read_text().splitlines())}
    cnn, vit = records["bit-r20x1-small"]["metrics"], records["vit-mu7"]["metrics"]
    # Fashion-MNIST's published two-conv CNN baselines are about 0.88-0.90 top-1 (the benchmark
    # table of zalandoresearch/fashion-mnist); one epoch from scratch must reach that range.
    # (Measured: 0.8857 with seed 0 on 2 CPU cores.)
    assert cnn["top1"] >= 0.88
    # The small ViT is reported honestly beside it; it must at least have learnt the task.
    assert vit["top1"] >= 0.80
    assert cnn["eval_images"] == vit["eval_images"] == 10_000
    assert cnn["train_images_seen"] == vit["train_images_seen"] == 60_000
