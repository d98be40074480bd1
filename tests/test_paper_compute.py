"""The paper's compute columns (Dosovitskiy et al. 2020, Table 6: pre-training exaFLOPs on JFT-300M)
against ours: 3 x 2 x forward MACs x 303M images x epochs."""

from pathlib import Path

import pytest
import torch

from benchbench.meters.flops import torch_count_macs
from benchbench.plan.suite import load_suite

REPO = Path(__file__).resolve().parent.parent

# (model, epochs): exaFLOPs printed in the paper's Table 6.
PAPER = {
    ("vit-b32", 7): 55, ("vit-b16", 7): 224, ("vit-l32", 7): 196, ("vit-l16", 7): 783, ("vit-l16", 14): 1567,
    ("vit-h14", 14): 4262,
    ("bit-r50x1", 7): 50, ("bit-r50x2", 7): 199, ("bit-r101x1", 7): 96, ("bit-r152x1", 7): 141,
    ("bit-r152x2", 7): 563, ("bit-r152x2", 14): 1126, ("bit-r200x3", 14): 3306,
    ("r50x1+vit-b32", 7): 106, ("r50x1+vit-b16", 7): 274, ("r50x1+vit-l32", 7): 246,
    ("r50x1+vit-l16", 7): 859, ("r50x1+vit-l16", 14): 1668,
}


def ours(catalog, model_id: str, epochs: int) -> float:
    spec = catalog.models.get(model_id)
    with torch.device("meta"):
        model = spec.build(num_classes=18_291, image_size=224, in_chans=3).eval()
    macs = torch_count_macs(model, torch.zeros(1, 3, 224, 224, device="meta"))
    return 3 * 2 * macs * 303e6 * epochs / 1e18


def test_the_suite_has_every_row_of_the_paper(catalog):
    suite = load_suite(str(REPO / "suites" / "paper-compute.toml"), catalog)
    rows = {(c.model, int(dict(c.settings)["epochs"])) for c in suite.cells}
    assert rows == set(PAPER)
    assert {c.dataset for c in suite.cells} == {"jft-300m"}


@pytest.mark.parametrize("row", sorted(PAPER))
def test_exaflops_against_the_paper(catalog, row):
    model, epochs = row
    ratio = ours(catalog, model, epochs) / PAPER[row]
    if model.startswith("bit-"):
        # The BiT rows are consistently 3.5-5% above the paper's (see README, "The paper's compute
        # columns"); the same convention gives the ViT rows within 1%, so the gap is the paper's.
        assert 1.03 <= ratio <= 1.055, ratio
    elif row in {("vit-b32", 7), ("r50x1+vit-b32", 7), ("r50x1+vit-l16", 7)}:
        assert 0.96 <= ratio <= 1.03, ratio  # documented outliers (README)
    else:
        assert ratio == pytest.approx(1.0, abs=0.006)  # within 0.6%
