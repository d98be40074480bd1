"""benchmarks/side_by_side.py (benchbench against timm's benchmark loop) run for real on the CPU, on the
tiny pair. Timings on a shared CPU are noise: these tests check the output's structure and the
same-model checks, never a speed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "side_by_side.py"
QUICK = ["--device", "cpu", "--threads", "1", "--batch-size", "4", "--warmup", "1", "--steps", "3"]


@pytest.fixture(scope="module", autouse=True)
def _timm():
    pytest.importorskip("timm", reason="timm is not installed: install benchbench's timm extra "
                                       "(pip install -e '.[timm]', or bash scripts/ci-setup-timm.sh)")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


def vit_params(hidden: int, depth: int, mlp: int, patch: int, tokens: int, classes: int, chans: int = 3) -> int:
    """The ViT's parameter count written out: patch projection, [class], positions, blocks, final LN, head."""
    block = 2 * 2 * hidden + (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden) \
        + (hidden * mlp + mlp) + (mlp * hidden + hidden)
    return (chans * patch * patch * hidden + hidden) + hidden + (tokens + 1) * hidden + depth * block \
        + 2 * hidden + (hidden * classes + classes)


def test_tiny_pair_json(tmp_path, formulas):
    lines = tmp_path / "rows.jsonl"
    proc = run("--models", "vit-mu4", "--rounds", "2", "--json", "--jsonl", str(lines), *QUICK)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["device"] == "cpu" and out["precision"] == "fp32" and out["batch_size"] == 4
    assert out["rounds"] == 2 and out["steps"] == 3 and out["threads"] == 1

    # ViT-Mu/4 at 28 px, 10 classes: hidden 64, 6 layers, MLP 128, a 7x7 grid (docs/models.md).
    check = out["checks"]["vit-mu4"]
    expected = vit_params(hidden=64, depth=6, mlp=128, patch=4, tokens=49, classes=10)
    assert expected == 208_010
    assert check["params_benchbench"] == check["params_timm"] == expected
    assert check["params_equal"] is True
    assert check["logits_equal"] is True and check["logits_max_abs"] > 0  # a non-trivial output, equal
    assert check["gmacs"] * 1e9 == pytest.approx(formulas.vit_macs(64, 6, 128, 4, 28, classes=10), rel=1e-9)

    rows = out["rows"]
    assert [(r["mode"], r["compiled"]) for r in rows] == [("train", False), ("infer", False)]
    for r in rows:
        assert r["model"] == "vit-mu4" and r["timm_model"] == "vit_tiny_patch16_224"
        assert len(r["timm_img_per_s"]) == len(r["benchbench_img_per_s"]) == len(r["ratio"]) == 2
        assert all(v > 0 for v in r["timm_img_per_s"] + r["benchbench_img_per_s"])
        assert r["ratio"] == pytest.approx([b / t for b, t in zip(r["benchbench_img_per_s"], r["timm_img_per_s"])])
        assert r["ratio_min"] <= r["ratio_median"] <= r["ratio_max"]
        assert r["mfu_datasheet_timm"] is None and r["mfu_datasheet_benchbench"] is None  # no CPU in the table

    # --jsonl: the same header, check and rows, a line each as it was known
    written = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [w.pop("kind") for w in written] == ["header", "check", "row", "row"]
    assert written[0] == {k: v for k, v in out.items() if k not in ("checks", "rows")}
    assert written[1] == {"model": "vit-mu4", **check} and written[2:] == rows


def test_mfu_is_model_flops_over_the_datasheet_peak(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import side_by_side

    from benchbench.precision import Precision

    h100, bf16 = torch.device("cuda"), Precision("bf16", "cuda")
    monkeypatch.setattr(side_by_side, "device_name", lambda device: "NVIDIA H100 80GB HBM3")  # issue 33's card
    # issue 33's figure: ViT-B/16 training at 3,242 img/s, 17.56 GMACs per image, 989 TFLOP/s bf16: 34.5 %
    assert side_by_side.mfu_datasheet(3242, 17.56, "train", h100, bf16) == pytest.approx(
        3242 * 6 * 17.56e9 / 989.5e12, rel=1e-9)
    assert side_by_side.mfu_datasheet(3242, 17.56, "train", h100, bf16) == pytest.approx(0.345, abs=0.001)
    assert side_by_side.mfu_datasheet(100, 1.0, "train", torch.device("cpu"), Precision("fp32", "cpu")) is None


def test_tiny_pair_table():
    proc = run("--models", "vit-mu4", "--rounds", "1", "--mode", "infer", *QUICK)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# ") and "fp32, batch 4, 1 rounds x 3 steps" in lines[0]
    assert "vit-mu4 vs timm vit_tiny_patch16_224: params 208,010 vs 208,010 (equal)" in proc.stdout
    assert "equal" in lines[1].rsplit(":", 1)[1]  # the logits verdict
    header = next(line for line in lines if line.startswith("| benchbench"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "benchbench", "timm", "mode", "run", "timm img/s", "range", "benchbench img/s", "range",
        "ratio bb/timm", "ratio range"]
    body = [line for line in lines if line.startswith("| vit-mu4")]
    assert len(body) == 1 and "| infer " in body[0] and "| eager " in body[0]


def test_unpaired_model_is_an_error_naming_the_pairs():
    proc = run("--models", "vit-l32", *QUICK)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "vit-l32" in proc.stderr and "known pairs: vit-mu4, vit-ti16, vit-b16, bit-r50x1" in proc.stderr
    assert "ID=TIMM_NAME" in proc.stderr
