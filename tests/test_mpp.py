"""Masked patch prediction: the corruption's proportions, the colour targets, the capability check, and
an mpp cell handing its weights to fine-tuning (init = "run:<dataset>:mpp")."""

import pytest
import torch

from benchbench.errors import BenchError
from benchbench.specs import PatchTokenModel
from benchbench.plan.suite import SuiteError, load_suite
from benchbench_plugins.protocols import masking
from benchbench_plugins.protocols.init_setting import parse_run_init, run_checkpoint
from benchbench_plugins.protocols.masking import KEPT, MASKED, RANDOM, UNTOUCHED


@pytest.mark.parametrize("patches, expect", [(16, (6, 1, 1)), (49, (20, 3, 2)), (196, (78, 10, 10)), (10, (4, 1, 0))])
def test_corruption_counts_are_the_papers_proportions(patches, expect):
    # 50 % corrupted (half up); of those 80 % [mask], 10 % random, the rest kept, each rounded half up.
    corrupted = int(patches / 2 + 0.5)
    assert sum(expect) == corrupted
    assert masking.corruption_counts(patches) == expect


def test_every_image_gets_exactly_those_counts_at_seeded_random_positions():
    gen = torch.Generator().manual_seed(0)
    plan = masking.corruption_plan(500, 16, gen)
    assert plan.shape == (500, 16)
    for kind, count in ((MASKED, 6), (RANDOM, 1), (KEPT, 1), (UNTOUCHED, 8)):
        assert ((plan == kind).sum(1) == count).all()
    # Positions are uniform: each is corrupted in about half the images (binomial sd of 500 * 0.5: 11).
    share = (plan != UNTOUCHED).float().mean(0)
    assert ((share - 0.5).abs() < 0.1).all()
    assert len({tuple(r.tolist()) for r in plan}) > 400  # not one pattern for all
    again = masking.corruption_plan(500, 16, torch.Generator().manual_seed(0))
    assert torch.equal(plan, again)


def test_corrupt_masks_replaces_and_keeps():
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randn(8, 16, 5)
    plan = masking.corruption_plan(8, 16, gen)
    mask_token = torch.full((5,), 7.0)
    out = masking.corrupt(tokens, plan, mask_token, gen)
    assert torch.equal(out[plan == MASKED], mask_token.expand(int((plan == MASKED).sum()), 5))
    keep = (plan == KEPT) | (plan == UNTOUCHED)
    assert torch.equal(out[keep], tokens[keep])
    pool = tokens.reshape(-1, 5)
    for row in out[plan == RANDOM]:  # each replacement is one of the batch's patch embeddings
        assert (pool == row).all(1).any()
    assert not torch.equal(tokens, out)


def _patchwise(colours: list[list[tuple[float, ...]]], patch: int) -> torch.Tensor:
    """An image (1, C, g * patch, g * patch) whose patch (i, j) has mean colour colours[i][j]: a left half
    at mean - d and a right half at mean + d, so only the mean is as given."""
    g, c = len(colours), len(colours[0][0])
    x = torch.zeros(1, c, g * patch, g * patch)
    for i in range(g):
        for j in range(g):
            for ch, v in enumerate(colours[i][j]):
                d = min(v, 1 - v, 0.05)
                block = x[0, ch, i * patch:(i + 1) * patch, j * patch:(j + 1) * patch]
                block[:, :patch // 2], block[:, patch // 2:] = v - d, v + d
    return x


def test_three_bit_mean_colour_is_one_of_512_classes():
    colours = [[(0.0, 0.0, 0.0), (1.0, 1.0, 1.0)], [(0.5, 0.25, 0.9), (0.1, 0.7, 0.3)]]
    x = _patchwise(colours, 4) * 2 - 1  # as the model sees it: [-1, 1]
    got = masking.colour_classes(x, 4, -1.0, 1.0).tolist()
    # levels floor(8 v) capped at 7; r * 64 + g * 8 + b
    expect = [0, 511, 4 * 64 + 2 * 8 + 7, 0 * 64 + 5 * 8 + 2]
    assert got == [expect]


def test_grey_patches_quantise_to_eight_levels():
    means = [(i + 0.5) / 8 for i in range(8)]  # the centre of each level
    rows = [means[:4], means[4:], means[:4], means[4:]]
    x = _patchwise([[(m,) for m in row] for row in rows], 2)
    assert masking.colour_classes(x, 2, 0.0, 1.0).tolist() == [[0, 1, 2, 3, 4, 5, 6, 7] * 2]
    # Normalised pixels (Fashion-MNIST's mean/std) map back through the given range; out-of-range clamps.
    mean, std = 0.2860, 0.3530
    edge = torch.tensor([0.0, 1.0, 0.124, 0.126]).view(1, 1, 1, 4)  # 1/8 = 0.125 splits levels 0 and 1
    z = (edge - mean) / std
    got = masking.colour_classes(z, 1, (0 - mean) / std, (1 - mean) / std)
    assert got.tolist() == [[0, 7, 0, 1]]
    assert masking.colour_classes(torch.full((1, 1, 2, 2), 5.0), 2, 0.0, 1.0).tolist() == [[7]]


def test_run_init_names_the_pretraining_protocol(tmp_path):
    assert parse_run_init("run:fashion-mnist") == ("fashion-mnist", "scratch")
    assert parse_run_init("run:fashion-mnist:mpp") == ("fashion-mnist", "mpp")
    assert parse_run_init("run:imagefolder:/data/x") == ("imagefolder:/data/x", "scratch")
    assert parse_run_init("run:imagefolder:/data/x:mpp") == ("imagefolder:/data/x", "mpp")
    scratch, mpp = (run_checkpoint(tmp_path, "vit-mu7", "fashion-mnist", 0, p) for p in ("scratch", "mpp"))
    assert scratch.name == "vit-mu7--fashion-mnist--seed0.pt" and mpp.name == "vit-mu7--fashion-mnist--seed0--mpp.pt"


def test_models_without_patch_tokens_are_refused_before_the_run(catalog, tmp_path):
    check = catalog.protocols.get("mpp").check_model
    assert check(catalog.models.get("vit-mu7")) is None
    assert check(catalog.models.get("r8x1-small+vit-mu4")) is None
    assert "has no patch tokens" in check(catalog.models.get("bit-r20x1-small"))
    vit = catalog.models.get("vit-mu4").build(num_classes=10, image_size=28, in_chans=1)
    assert isinstance(vit, PatchTokenModel)
    path = tmp_path / "s.toml"
    path.write_text('[suite]\nmodels = ["vit-mu7", "bit-r20x1-small"]\ndatasets = ["fashion-mnist"]\n'
                    'protocols = ["mpp"]\n')
    with pytest.raises(SuiteError, match="bit-r20x1-small x fashion-mnist x mpp: mpp: model 'bit-r20x1-small' "
                                         "has no patch tokens"):
        load_suite(str(path), catalog)


def test_mpp_then_finetune_from_its_weights(run_suite, capsys):
    run_suite.write("""
        [suite]
        models = ["vit-mu7"]
        datasets = ["fashion-mnist"]
        protocols = ["mpp"]
        [settings.mpp]
        steps = 3
        batch_size = 50
        test_subset = 50
        [settings.finetune]
        init = "run:fashion-mnist:mpp"
        steps = 2
        batch_size = 50
        [[group]]
        protocols = ["finetune"]
    """)
    assert run_suite.run() == 0, capsys.readouterr().err
    pre, tuned = run_suite.records()
    assert pre.status == "ok" and tuned.status == "ok", (pre.error, tuned.error)
    m = pre.metrics
    assert m["mpp_classes"] == 8 and m["train_images_seen"] == 150
    assert 0 <= m["mpp_top1"] <= 1 and 0 < m["mpp_majority_top1"] <= 1
    assert m["eval_patches"] == 50 * 8  # 8 of a 4x4 grid's 16 patches corrupted per test image
    path = run_suite.run_dir / "checkpoints" / "vit-mu7--fashion-mnist--seed0--mpp.pt"
    meta = torch.load(path, weights_only=True)["meta"]
    assert meta["protocol"] == "mpp" and meta["dataset"] == "fashion-mnist"
    assert not (run_suite.run_dir / "checkpoints" / "vit-mu7--fashion-mnist--seed0.pt").exists()
    # The fine-tuning cell reads the mpp cell's cost.
    assert tuned.metrics["pretrain_images_seen"] == 150
    assert tuned.metrics["pretrain_device_seconds"] == pytest.approx(m["train_device_seconds"])


def test_mpp_refuses_a_cnn_at_run_time_too(catalog):
    from benchbench.settings import resolve
    from benchbench.specs import DataOptions, ProtocolContext

    spec = catalog.models.get("bit-r20x1-small")
    ctx = ProtocolContext(model=spec.build(num_classes=10, image_size=28, in_chans=1), model_spec=spec,
                          dataset_spec=catalog.datasets.get("fashion-mnist"), data=DataOptions(),
                          settings=resolve(catalog.protocols.get("mpp"), {}, "test"),
                          device=torch.device("cpu"), seed=0)
    with pytest.raises(BenchError, match="no patch tokens"):
        catalog.protocols.get("mpp").run(ctx)
