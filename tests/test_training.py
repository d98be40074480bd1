import math

import pytest
import torch

from benchbench.precision import resolve as resolve_precision
from torch.utils.data import TensorDataset

from benchbench_plugins.protocols.loader import batches
from benchbench_plugins.protocols.subsets import random_subset as subset
from benchbench_plugins.protocols.training import evaluate, param_groups, warmup_cosine


def test_warmup_cosine_schedule():
    f = warmup_cosine(total_steps=110, warmup_steps=10)
    assert [f(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert f(10) == 1.0
    assert f(60) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(110) == pytest.approx(0.0)


def test_evaluate_top1_top5_on_known_predictions():
    # Logits rank class (label + k) % 10 at position k; with label shifts we know every answer.
    labels = torch.arange(10)
    class Fixed(torch.nn.Module):
        def forward(self, x):
            shift = x[:, 0, 0, 0].long()  # how far down the ranking the true class sits
            label = x[:, 0, 0, 1].long()
            scores = torch.zeros(len(x), 10)
            for i, (y, s) in enumerate(zip(label, shift)):
                for rank in range(10):
                    scores[i, (int(y) - int(s) + rank) % 10] = 10 - rank
            return scores

    shifts = torch.tensor([0, 0, 0, 1, 2, 4, 5, 6, 9, 0], dtype=torch.float32)
    x = torch.zeros(10, 1, 2, 2)
    x[:, 0, 0, 0], x[:, 0, 0, 1] = shifts, labels.float()
    cpu = torch.device("cpu")
    acc = evaluate(Fixed(), TensorDataset(x, labels), cpu, batch_size=3, precision=resolve_precision("fp32", cpu))
    assert acc.top1 == pytest.approx(4 / 10)  # shift 0
    assert acc.top5 == pytest.approx(7 / 10)  # shift < 5
    assert acc.images == 10


def test_batches_cover_every_example_once():
    ds = TensorDataset(torch.arange(10).float(), torch.arange(10))
    seen = torch.cat([y for _, y in batches(ds, 3, shuffle=True, generator=torch.Generator().manual_seed(0))])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))


def test_subset_is_seeded():
    ds = TensorDataset(torch.arange(100).float(), torch.arange(100))
    a, b = subset(ds, 10, seed=1), subset(ds, 10, seed=1)
    assert torch.equal(a.tensors[1], b.tensors[1]) and len(a) == 10
    assert subset(ds, 0, seed=1) is ds


def test_weight_decay_only_on_matrices_and_kernels():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    decay, no_decay = param_groups(model, 0.1)
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])] and decay["weight_decay"] == 0.1
    assert len(no_decay["params"]) == 3 and no_decay["weight_decay"] == 0.0


def test_linear_schedule():
    from benchbench_plugins.protocols.training import warmup_linear

    f = warmup_linear(total_steps=110, warmup_steps=10)
    assert [f(s) for s in (0, 9, 10, 60, 110)] == pytest.approx([0.1, 1.0, 1.0, 0.5, 0.0])


def test_precision_auto_is_bf16_on_cuda_only():
    from benchbench.precision import Precision, resolve

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve("auto", cpu) == Precision("fp32", "cpu") and resolve("auto", cuda).name == "bf16"
    assert resolve("fp32", cuda) == Precision("fp32", "cuda")
    with resolve("bf16", cpu).autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    with resolve("auto", cpu).autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float32


def test_loader_applies_the_batch_transform_and_keeps_the_shuffle():
    from benchbench_plugins.datasets.transforms import BatchTransform, TensorImages
    from benchbench_plugins.protocols.loader import Loader

    ds = TensorImages(torch.arange(6, dtype=torch.uint8).view(6, 1, 1, 1), torch.arange(6),
                      BatchTransform(mean=(0.5,), std=(0.5,)))
    loader = Loader(ds, 4, shuffle=True, generator=torch.Generator().manual_seed(0))
    assert len(loader) == 2
    xs, ys = zip(*loader)
    y = torch.cat(ys)
    assert sorted(y.tolist()) == list(range(6))
    assert torch.allclose(torch.cat(xs).flatten(), y.float() / 127.5 - 1)
    # The same generator state gives the same order as the plain slicing path had (randperm per epoch).
    assert torch.equal(y, torch.randperm(6, generator=torch.Generator().manual_seed(0)))


def test_scratch_settings_are_validated(catalog):
    from benchbench.errors import BenchError
    from benchbench.settings import resolve

    scratch = catalog.protocols.get("scratch")
    s = resolve(scratch, {}, "s")
    # Existing defaults keep their meaning; the new ones are off.
    assert (s["epochs"], s["batch_size"], s["optimizer"], s["lr"], s["weight_decay"]) == (1, 128, "adamw", 1e-3, 0.05)
    assert (s["train_per_class"], s["save_checkpoint"], s["precision"], s["augment"], s["resolution"]) == \
        (0, False, "auto", False, 0)
    for given, message in (({"precision": "fp4"}, "allowed: auto, fp32, tf32, bf16, fp16, fp8"),
                           ({"train_per_class": -1}, "must be >= 0"), ({"save_checkpoint": 1}, "expected bool"),
                           ({"optimizer": "lamb"}, "allowed: adamw, adam, sgd"), ({"beta2": 1.0}, r"\[0, 1\)"),
                           ({"num_workers": -5}, "must be >= -1"), ({"epoch": 1}, "did you mean 'epochs'")):
        with pytest.raises(BenchError, match=message):
            resolve(scratch, given, "s")


def test_scratch_estimate_counts_images(catalog):
    from benchbench.settings import resolve

    scratch = catalog.protocols.get("scratch")
    spec = catalog.datasets.get("fashion-mnist")
    est = scratch.estimate(resolve(scratch, {"epochs": 2, "train_per_class": 100}, "s"), spec)
    assert est == {"train_images": 2 * 1000.0, "eval_images": 10_000.0}
    assert scratch.estimate(resolve(scratch, {"steps": 5, "batch_size": 64}, "s"), spec)["train_images"] == 320


def test_scratch_trains_on_n_per_class_in_bf16(catalog, tiny_data, protocol_context):
    from benchbench.specs import DataOptions

    scratch = catalog.protocols.get("scratch")
    torch.manual_seed(0)
    ctx = protocol_context("scratch", {"steps": 1, "train_per_class": 5, "precision": "bf16", "test_subset": 20},
                           data=DataOptions(root=tiny_data, image_size=28, in_chans=1))
    assert ctx.precision.name == "bf16"
    m = scratch.run(ctx)
    assert m["train_images_seen"] == 50 and m["train_steps"] == 1 and m["eval_images"] == 20
    assert math.isfinite(m["train_loss"])


@pytest.mark.parametrize("steps, seen, distinct", [(5, 40, 40), (30, 232, 100)])
def test_fit_counts_the_set_the_images_seen_and_the_distinct_ones(steps, seen, distinct, protocol_context):
    from benchbench_plugins.protocols.training import fit

    train = TensorDataset(torch.randn(100, 4), torch.arange(100) % 3)
    model = torch.nn.Linear(4, 3)
    m = fit(model, train, protocol_context("scratch", {"steps": steps, "batch_size": 8, "precision": "fp32"},
                                           model=model))
    # 100 images in batches of 8: 12 full batches and one of 4 per epoch; 30 steps = 13 + 13 + 4 batches = 100 + 100 + 32 images
    assert (m["train_examples"], m["train_steps"], m["train_images_seen"], m["train_distinct_images"]) == (
        100, steps, seen, distinct)
    assert m["train_epochs"] == pytest.approx(seen / 100)
