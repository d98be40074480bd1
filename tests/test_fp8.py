"""precision = "fp8": torchao's float8 training, refused where it cannot run, kept apart in tables
(benchbench/precision.py, benchbench/report/tables.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchbench.errors import BenchError


def test_fp8_off_cuda_is_a_clear_error_before_any_step():
    from benchbench import precision

    assert "fp8" in precision.CHOICES
    with pytest.raises(BenchError, match=r"'fp8' needs a CUDA GPU of compute capability >= 8\.9 .*this device is "
                                         r"cpu: use bf16"):
        precision.resolve("fp8", torch.device("cpu"))


def test_fp8_is_for_training_only_in_one_place():
    from benchbench import precision

    for infer in (lambda: precision.resolve("fp8", torch.device("cuda"), mode="infer"),
                  lambda: precision.resolve("fp8", torch.device("cpu"), mode="infer")):
        with pytest.raises(BenchError, match="fp8 inference is a different method"):
            infer()  # before any device is asked
    assert precision.request_problem("fp8", "train") is None
    assert "fp8 inference" in precision.request_problem("fp8", "infer")
    assert precision.setting_check("infer")("fp8") == precision.request_problem("fp8", "infer")


def test_fp8_problem_names_the_gpu_its_capability_and_the_install():
    from benchbench.precision import fp8_problem

    a100 = fp8_problem("cuda", "NVIDIA A100-SXM4-80GB", (8, 0), True)
    assert "NVIDIA A100-SXM4-80GB has compute capability 8.0" in a100 and a100.endswith("use bf16")
    assert "capability 8.6" in fp8_problem("cuda", "NVIDIA GeForce RTX 3090", (8, 6), True)
    assert fp8_problem("cuda", "NVIDIA L4", (8, 9), True) is None  # Ada
    assert fp8_problem("cuda", "NVIDIA H100 80GB HBM3", (9, 0), True) is None  # Hopper
    assert "pip install 'benchbench[fp8]'" in fp8_problem("cuda", "NVIDIA H100 80GB HBM3", (9, 0), False)
    assert "this device is mps" in fp8_problem("mps", None, None, True)


def test_a_training_setting_and_the_measuring_command_lines_accept_fp8(catalog):
    from benchbench.cli import parser
    from benchbench.settings import resolve

    scratch = catalog.protocols.get("scratch")
    assert resolve(scratch, {"precision": "fp8"}, "s")["precision"] == "fp8"
    for argv in (["profile", "vit-b16", "--mode", "train"], ["cost", "vit-b16", "--epochs", "1"], ["device"]):
        assert parser().parse_args([*argv, "--precision", "fp8"]).precision == "fp8"  # the policy refuses it later


class _Blocks(nn.Module):
    """Pre-LN MLP blocks of a transformer on (batch, tokens, width) and a `classes`-way head."""

    def __init__(self, width: int, hidden: int, depth: int, classes: int):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(),
                                                  nn.Linear(hidden, width)) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=1))


def test_for_precision_swaps_the_eligible_linears_in_place_keeping_their_parameters():
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    from benchbench.precision import Precision

    bf16, fp8 = Precision("bf16", "cpu"), Precision("fp8", "cpu")  # the conversion itself: no device rules here
    model = _Blocks(32, 64, 2, classes=10)
    weights = [p for p in model.parameters()]
    assert bf16.for_model(model) is model and not any(isinstance(m, Float8Linear) for m in model.modules())
    assert fp8.for_model(model) is model
    swapped = {name for name, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert swapped == {"blocks.0.1", "blocks.0.3", "blocks.1.1", "blocks.1.3"}  # not the 10-class head
    assert type(model.head) is nn.Linear
    assert [p for p in model.parameters()] == weights  # the same Parameters: an optimiser built before holds them
    fp8.for_model(model)  # twice: nothing more to convert
    assert {name for name, m in model.named_modules() if isinstance(m, Float8Linear)} == swapped


def test_float8_linears_train_close_to_float32():
    """torchao's float8 matmuls (emulated here, on the CPU) against the same layers in float32: one
    loss and its gradient, close as e4m3's 3 mantissa bits allow."""
    pytest.importorskip("torchao")
    from benchbench.precision import Precision

    torch.manual_seed(0)
    ref = _Blocks(64, 128, 2, classes=10)
    fp8 = Precision("fp8", "cpu").for_model(copy.deepcopy(ref))
    x, y = torch.randn(8, 16, 64), torch.randint(0, 10, (8,))
    losses, grads = [], []
    for model in (ref, fp8):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.blocks[0][1].weight.grad.flatten())
    assert losses[1] == pytest.approx(losses[0], rel=0.02)
    assert F.cosine_similarity(grads[0], grads[1], dim=0) > 0.99


def test_tables_keep_fp8_cells_apart_from_bf16(make_record):
    from benchbench.store import results
    from benchbench.report.tables import build_table

    df = results.frame([
        make_record("vit-b16", top1=0.80, settings={"precision": "bf16"}, precision="bf16", train_device_days=1.0),
        make_record("vit-b16", top1=0.79, settings={"precision": "fp8"}, precision="fp8", train_device_days=0.6),
        make_record("vit-b16", seed=1, top1=0.82, settings={"precision": "bf16"}, precision="bf16", train_device_days=1.0),
    ])
    table = build_table(df, "models")
    assert [row[0] for row in table.rows] == ["VIT-B16 (bf16)", "VIT-B16 (fp8)"]
    assert list(table.data["train_device_days"]) == [2.0, 0.6]
    assert table.rows[0][3] == "81.00 ± 1.41" and table.rows[1][3] == "79.00"
    only_bf16 = results.frame([make_record("vit-b16", top1=0.80, settings={"precision": "bf16"}, precision="bf16")])
    assert [row[0] for row in build_table(only_bf16, "models").rows] == ["VIT-B16"]
    only_fp8 = results.frame([make_record("vit-b16", top1=0.80, settings={"precision": "fp8"}, precision="fp8")])
    assert [row[0] for row in build_table(only_fp8, "models").rows] == ["VIT-B16 (fp8)"]  # fp8: always said


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs a CUDA GPU of compute capability >= 8.9")
def test_fp8_trains_vit_b16_sized_layers_close_to_bf16():
    """Forty steps of the shared training step on ViT-B/16-sized MLP blocks (width 768, hidden 3072,
    197 tokens) fitting one batch: fp8's loss follows bf16's from the same start. (The same run with 16
    tokens, torchao's float8 emulated on a CPU, gave bf16 / fp8 losses 6.894 / 6.894 at step 0, 2.154 /
    2.102 at step 5, 0.029 / 0.080 at step 10, both below 1e-4 by step 40.)"""
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    from benchbench.precision import resolve
    from benchbench.step import train_step

    cuda = torch.device("cuda")
    torch.manual_seed(0)
    start = _Blocks(768, 3072, 4, classes=1000).to(cuda)
    x, y = torch.randn(64, 197, 768, device=cuda), torch.randint(0, 1000, (64,), device=cuda)
    curves = {}
    for precision in ("bf16", "fp8"):
        model = copy.deepcopy(start)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = train_step(model, opt, resolve(precision, cuda))
        curves[precision] = [step(x, y).item() for _ in range(40)]
        assert any(isinstance(m, Float8Linear) for m in model.modules()) == (precision == "fp8")
    bf16, fp8 = curves["bf16"], curves["fp8"]
    assert fp8[0] == pytest.approx(bf16[0], rel=0.02)
    assert bf16[-1] < 0.05 * bf16[0] and fp8[-1] < 0.05 * fp8[0]  # both fit the batch
    for a, b in zip(bf16[:10], fp8[:10]):  # while the loss is far from zero, the curves agree
        assert abs(a - b) <= 0.15 * a + 0.1
