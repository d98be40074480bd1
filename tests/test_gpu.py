"""CUDA paths: a cell trains on the GPU, with device time synchronised; skipped without a GPU."""

import pytest
import torch

from benchbench.meters.flops import count_macs
from benchbench_plugins.models import vision_transformer as vit

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def test_cell_runs_on_cuda(run_suite, tiny_suite):
    run_suite.device = "cuda"
    assert run_suite.run(suite=tiny_suite) == 0
    (run_dir,) = (run_suite.results / "tiny").iterdir()
    df = run_suite.frame(run_dir)
    assert list(df["device"]) == ["cuda", "cuda"] and (df["train_device_seconds"] > 0).all()
    assert df["top1"].iloc[0] > 0.9


def test_flash_attention_matches_math_path():
    torch.manual_seed(0)
    model = vit.create("Ti", 16).cuda().eval()
    x = torch.randn(4, 3, 224, 224, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        fused = model.features(x).float()  # (the head is zero at init: compare the features)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            math_path = model.features(x).float()
    assert fused.abs().mean() > 0.1
    torch.testing.assert_close(fused, math_path, rtol=0.05, atol=0.05)
    assert count_macs(model.cpu().float(), 224).status == "ok"
