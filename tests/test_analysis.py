"""`benchbench analyze`'s numbers on constructed cases (identity and uniform attention, identical position
embeddings, filters built from known components), the explicit attention path against the fused kernel,
and the command end to end."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchbench.report import analysis
from benchbench_plugins.models import vision_transformer


def _grid_mean_distance(grid: int, patch: int) -> float:
    """The mean distance in pixels between patch centres over all ordered pairs (itself included)."""
    cells = list(itertools.product(range(grid), range(grid)))
    return sum(math.hypot(a[0] - b[0], a[1] - b[1]) for a in cells for b in cells) * patch / len(cells) ** 2


def test_identity_attention_has_distance_zero_and_rollout_identity():
    t = 1 + 4 * 4
    eye = torch.eye(t).expand(3, 2, t, t)
    assert torch.equal(analysis.mean_attention_distance(eye, 4, 7), torch.zeros(2, dtype=torch.float64))
    assert torch.allclose(analysis.attention_rollout([eye] * 5), torch.eye(t, dtype=torch.float64).expand(3, t, t))


@pytest.mark.parametrize("grid, patch", [(2, 14), (4, 7), (7, 4)])
def test_uniform_attention_gives_the_grids_mean_distance(grid, patch):
    t = 1 + grid * grid
    uniform = torch.full((2, 3, t, t), 1.0 / t)
    got = analysis.mean_attention_distance(uniform, grid, patch)
    assert got.tolist() == pytest.approx([_grid_mean_distance(grid, patch)] * 3, rel=1e-12)
    # 2x2 grid by hand: each query sees itself (0), two neighbours (1) and a diagonal (sqrt 2), in patches.
    if grid == 2:
        assert float(got[0]) == pytest.approx(patch * (2 + math.sqrt(2)) / 4)


def test_attention_to_one_far_patch():
    # Every query attends only to patch 0 (top left) of a 3x3 grid: its distance from each patch.
    t = 10
    a = torch.zeros(1, 1, t, t)
    a[..., 1] = 1.0
    expect = np.mean([math.hypot(i, j) for i in range(3) for j in range(3)]) * 5
    assert float(analysis.mean_attention_distance(a, 3, 5)[0]) == pytest.approx(expect)


def test_rollout_matches_a_hand_computation():
    rng = np.random.default_rng(0)
    layers = [rng.random((2, 3, 3)) for _ in range(2)]  # (heads, T, T)
    layers = [a / a.sum(-1, keepdims=True) for a in layers]
    res = [(a.mean(0) + np.eye(3)) for a in layers]
    res = [r / r.sum(-1, keepdims=True) for r in res]
    expect = res[1] @ res[0]
    got = analysis.attention_rollout([torch.tensor(a)[None] for a in layers])[0].numpy()
    np.testing.assert_allclose(got, expect, rtol=1e-12)
    assert np.allclose(got.sum(-1), 1.0)


def test_identical_position_embeddings_are_similar_everywhere():
    pos = torch.randn(1, 8).expand(16, 8)
    assert torch.allclose(analysis.position_similarity(pos), torch.ones(16, 16, dtype=torch.float64))
    orth = torch.eye(4) * 3.0
    assert torch.allclose(analysis.position_similarity(orth), torch.eye(4, dtype=torch.float64))


def test_pca_recovers_known_filter_components():
    torch.manual_seed(0)
    basis, _ = torch.linalg.qr(torch.randn(3 * 4 * 4, 3, dtype=torch.float64))  # 3 orthonormal components
    scales = torch.tensor([5.0, 2.0, 0.5], dtype=torch.float64)
    coeffs = torch.randn(2000, 3, dtype=torch.float64) * scales
    filters = (coeffs @ basis.T + 0.3).reshape(2000, 3, 4, 4)  # an offset the centring must remove
    comps, explained = analysis.filter_components(filters, 3)
    assert comps.shape == (3, 3, 4, 4)
    for i in range(3):
        cos = float(comps[i].reshape(-1) @ basis[:, i])
        assert abs(cos) > 0.999
    share = scales**2 / (scales**2).sum()
    assert explained.tolist() == pytest.approx(share.tolist(), abs=0.02)


def test_explicit_attention_is_what_the_fused_kernel_computes_and_training_never_asks_for_it(monkeypatch):
    torch.manual_seed(0)
    model = vision_transformer.create("Mu", 7, num_classes=10, image_size=28, in_chans=1).eval()
    x = torch.randn(2, 1, 28, 28)
    weights = model.attention_weights(x)
    assert len(weights) == 6 and weights[0].shape == (2, 4, 17, 17)
    block = model.blocks[0]
    h = block.ln1(model._tokens(model.embed_patches(x)))
    q, k, v = block.attn.qkv(h).reshape(2, 17, 3, 4, 16).permute(2, 0, 3, 1, 4)
    assert torch.allclose(weights[0] @ v, F.scaled_dot_product_attention(q, k, v), atol=1e-5)

    def refuse(*_):
        raise AssertionError("the forward pass computed attention weights")

    monkeypatch.setattr(vision_transformer.Attention, "weights", refuse)
    model.train()
    model(x).sum().backward()  # training's forward and backward: the fused kernel only


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_analyze_command_writes_figures_and_numbers(run_suite, tiny_data, tmp_path):
    out = tmp_path / "an"
    done = run_suite.cli("analyze", "vit-mu7", "r8x1-small+vit-mu4", "--dataset", "fashion-mnist", "--data-root",
                         str(tiny_data), "--images", "3", "-o", str(out), "--format", "svg")
    assert done.returncode == 0, done.stderr
    names = {p.name for p in out.iterdir()}
    assert {"analysis.json", "analysis.md", "attention-distance.svg", "filters--vit-mu7-random-init.svg",
            "rollout--vit-mu7-random-init.svg", "position-similarity--r8x1-small+vit-mu4-random-init.svg"} <= names
    assert "filters--r8x1-small+vit-mu4-random-init.svg" not in names  # a hybrid's embedding is a CNN
    vit, hybrid = json.loads((out / "analysis.json").read_text())["results"]
    assert (vit["grid"], vit["patch_size"], hybrid["grid"], hybrid["patch_size"]) == (4, 7, 7, 4)
    assert vit["uniform_distance_px"] == pytest.approx(_grid_mean_distance(4, 7))
    assert len(vit["attention_distance_px"]) == 6 and len(vit["attention_distance_px"][0]) == 4
    assert np.array(vit["rollout"]).shape == (3, 4, 4)
    assert "Mean attention distance" in (out / "analysis.md").read_text()


@pytest.mark.slow  # ~4 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_analyze_refuses_a_cnn(run_suite, tiny_data, tmp_path):
    done = run_suite.cli("analyze", "bit-r20x1-small", "--dataset", "fashion-mnist", "--data-root", str(tiny_data),
                         "-o", str(tmp_path / "x"))
    assert done.returncode == 2 and "has no patch tokens" in done.stderr and "Traceback" not in done.stderr
