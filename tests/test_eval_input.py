"""benchmarks/eval_input.py (benchbench's evaluation input pipeline against timm's validate.py): its
transforms give timm's own tensors on a real JPEG, and a tiny run agrees with timm image for image.
Timings on a shared CPU are noise: nothing here checks a speed."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "eval_input.py"
timm = pytest.importorskip("timm", reason="timm is not installed: install benchbench's timm extra")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("eval_input", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_transforms_give_timms_tensors(bench, tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "a.jpg"
    Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(path, quality=90)
    image = Image.open(path).convert("RGB")
    config = timm.data.resolve_data_config({}, model=timm.create_model("mobilenetv3_small_050"))
    pre = bench.preprocessing_of(config)
    assert (pre.resize_size, pre.crop_size, pre.interpolation) == (256, 224, "bicubic")  # floor(224 / 0.875)
    expected = timm.data.create_transform(**config)(image)  # ToTensor + Normalize
    assert torch.allclose(bench.explicit_transform(pre)(image), expected, atol=1e-5)
    # the uint8 pixels timm's prefetching pipeline carries from its workers
    as_uint8 = timm.data.create_transform(**config, use_prefetcher=True)(image)
    assert torch.equal(bench.uint8_transform(pre)(image), torch.from_numpy(np.asarray(as_uint8)))


@pytest.mark.slow
def test_a_tiny_run_agrees_with_timm_image_for_image(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--images", "16", "--batch-size", "8", "--workers", "0",
                           "--threads", "1", "--rounds", "1", "--warmup-rounds", "0", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["img_per_s"]) == {"timm", "timm_less_warmup", "benchbench", "benchbench_uint8"}
    for side in ("benchbench", "benchbench_uint8"):
        agreement = report["agreement_with_timm"][side]
        assert agreement["top1_agree"] == agreement["top1_compared"] == 16
        assert agreement["max_abs_logit_diff"] < 1e-4
