import math

import pytest
import torch
from torch.utils.data import TensorDataset

from benchbench.training import batches, evaluate, param_groups, subset, warmup_cosine


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
    acc = evaluate(Fixed(), TensorDataset(x, labels), torch.device("cpu"), batch_size=3)
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
