"""In-memory data held on the device, counts read once, larger evaluation batches: what a cell
computes does not change (plugins/protocols/loader.py, inference.py, training.py, features.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from benchbench.precision import resolve

FP32 = resolve("fp32", torch.device("cpu"))
import torch.nn.functional as F


def _images(n: int, seed: int, classes: int = 10):
    from benchbench_plugins.datasets.transforms import BatchTransform, TensorImages

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, 8, 8), dtype=torch.uint8, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return TensorImages(x, y, BatchTransform(mean=(0.3,), std=(0.4,)))


def test_fits_on_device_is_a_fraction_of_free_memory_and_a_no_op_on_the_cpu():
    from benchbench_plugins.protocols.loader import RESIDENT_FRACTION, data_bytes, fits_on_device

    assert data_bytes([torch.zeros(10, 3, dtype=torch.uint8), torch.zeros(10, dtype=torch.long)]) == 30 + 80
    free = 4_000
    limit = int(RESIDENT_FRACTION * free)
    assert fits_on_device(limit, torch.device("cuda"), free_bytes=free)
    assert not fits_on_device(limit + 1, torch.device("cuda"), free_bytes=free)
    assert fits_on_device(10**15, torch.device("cpu"))  # where the tensors already are
    assert not fits_on_device(1, torch.device("meta"))  # free memory unknown: stay on the host


@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_resident_batches_are_the_host_batches(shuffle, world):
    """Held on the device (the CPU here) or not, each rank gets the same batches from the same
    seeded permutation; the ranks' parts together are the single-process batch."""
    from benchbench_plugins.protocols.loader import Loader

    ds = _images(23, seed=1)

    def run(rank, device):
        loader = Loader(ds, 5, shuffle=shuffle, generator=torch.Generator().manual_seed(7), rank=rank,
                        world=world, device=device)
        return loader, list(loader)

    for rank in range(world):
        plain, host = run(rank, None)
        resident, held = run(rank, "cpu")
        assert not plain.resident and resident.resident
        assert len(host) == len(held) == 5
        for (xa, ya), (xb, yb) in zip(host, held):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    # The ranks' parts are the single-process batches, computed here from the permutation by hand.
    order = torch.randperm(23, generator=torch.Generator().manual_seed(7)) if shuffle else torch.arange(23)
    parts = [run(rank, "cpu")[1] for rank in range(world)]
    for b in range(5):
        got = torch.cat([parts[r][b][1] for r in range(world)])
        assert torch.equal(got, ds.tensors[1][order[5 * b:5 * b + 5]])


def test_batch_transform_moved_to_a_device_gives_the_same_numbers():
    from benchbench_plugins.datasets.transforms import BatchTransform

    t = BatchTransform(mean=(0.3,), std=(0.4,), size=12)
    x = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8)
    moved = t.to(torch.device("cpu"))
    assert moved is not t and torch.equal(moved(x), t(x))
    expected = F.interpolate((x.float() / 255 - 0.3) / 0.4, size=(12, 12), mode="bilinear", align_corners=False)
    assert torch.allclose(t(x), expected, atol=1e-6)


def test_eval_batch_sizes_grow_only_for_one_cuda_process():
    from benchbench_plugins.protocols.inference import EVAL_BATCH_MAX, eval_batch_sizes

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert eval_batch_sizes(512, 10_000, cpu) == [512]
    assert eval_batch_sizes(512, 10_000, cuda, world=2) == [512]  # every rank the same forward passes
    assert eval_batch_sizes(512, 256, cuda) == [512]  # one batch already
    assert EVAL_BATCH_MAX == 2048
    assert eval_batch_sizes(512, 10_000, cuda) == [2048, 1024, 512]
    assert eval_batch_sizes(300, 1000, cuda) == [1000, 500, 300]


def test_evaluate_counts_do_not_depend_on_the_batch_size():
    """Top-1/top-5 counts at several batch sizes equal one plain forward pass over the whole set."""
    from benchbench_plugins.protocols.training import evaluate

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Linear(32, 10))
    ds = _images(101, seed=2)
    with torch.no_grad():
        logits = model(ds.apply(ds.tensors[0]))
    y = ds.tensors[1]
    ranked = logits.argsort(dim=1, descending=True)
    top1 = int((ranked[:, 0] == y).sum())
    top5 = int((ranked[:, :5] == y[:, None]).any(dim=1).sum())
    assert 0 < top1 < top5 < 101
    for batch_size in (1, 7, 50, 101, 512):
        acc = evaluate(model, ds, torch.device("cpu"), batch_size, precision=FP32)
        assert (round(acc.top1 * 101), round(acc.top5 * 101), acc.images) == (top1, top5, 101)
        assert acc.batch_size == batch_size  # on the CPU exactly the batch size asked for


def test_a_pass_falls_back_to_the_next_batch_size_when_cuda_memory_runs_out():
    """at_largest_batch, shared by evaluation and feature extraction: each try starts over, the first
    size that does not run out of memory is used, the last one's error is raised."""
    from benchbench_plugins.protocols.inference import at_largest_batch

    tried = []

    def run(size):  # a pass whose batches of more than 600 images do not fit
        tried.append(size)
        if size > 600:
            raise torch.cuda.OutOfMemoryError(f"{size} images")
        return f"ran at {size}"

    assert at_largest_batch([2048, 1024, 512, 256], run) == ("ran at 512", 512)
    assert tried == [2048, 1024, 512]
    with pytest.raises(torch.cuda.OutOfMemoryError, match="700 images"):
        at_largest_batch([1400, 700], run)


class _Tiny(torch.nn.Module):
    """A CNN with a `features` method (the pre-logits the few-shot and linear protocols read)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = torch.nn.Conv2d(1, 6, 3), torch.nn.Linear(6 * 6 * 6, 12)

    def features(self, x):
        return self.fc(F.gelu(self.conv(x)).flatten(1))


def test_features_on_the_cpu_are_todays_and_in_dataset_order_at_any_batch_size():
    """`extract` on the CPU: bit-identical to the loop it replaced (the dataset's transform and
    `features` over slices of `batch_size`, written out here), at exactly `batch_size`; at another
    batch size the same features of the same images in the same order."""
    from benchbench_plugins.protocols.features import extract

    model, ds, cpu = _Tiny().eval(), _images(101, seed=4), torch.device("cpu")
    x, y = ds.tensors
    with torch.no_grad():
        before = torch.cat([model.features(ds.apply(x[i:i + 16])).float().flatten(1) for i in range(0, 101, 16)])
    f = extract(model, ds, cpu, 16, precision=FP32)
    assert torch.equal(f.x, before) and torch.equal(f.y, y) and f.batch_size == 16
    with torch.no_grad():
        one_by_one = torch.cat([model.features(ds.apply(x[i:i + 1])) for i in range(101)])
    for batch_size in (7, 101):
        other = extract(model, ds, cpu, batch_size, precision=FP32)
        assert torch.equal(other.y, y) and other.batch_size == batch_size
        # the same image's features at any batch size (up to the matmul's blocking), row by row
        assert torch.allclose(other.x, f.x, rtol=0, atol=1e-5) and torch.allclose(other.x, one_by_one, atol=1e-5)
    assert len({tuple(r.tolist()) for r in f.x}) == 101  # every row its own image: order is pinned


def test_a_quickstart_like_cell_trains_and_scores_as_a_plain_loop(catalog, tiny_data, protocol_context):
    """The scratch protocol (data held on the device, counts read once) against a plain loop written
    out here: the same seeded permutation, flip augmentation, AdamW with decay on matrices only,
    warm-up + cosine by formula, clipping, one forward over the test set. Same top-1, same loss."""
    from benchbench.specs import DataOptions

    scratch = catalog.protocols.get("scratch")
    model_spec, data_spec = catalog.models.get("vit-mu7"), catalog.datasets.get("fashion-mnist")
    torch.manual_seed(0)
    model = model_spec.build(num_classes=10, image_size=28, in_chans=1)
    plain = copy.deepcopy(model)
    data = DataOptions(root=tiny_data, image_size=28, in_chans=1)
    # Three batches an epoch (16, 16, 8): eight steps cross two epochs and their short last batches.
    ctx = protocol_context("scratch", {"steps": 8, "batch_size": 16, "train_subset": 40, "lr": 3e-3,
                                       "weight_decay": 0.05, "warmup_fraction": 0.25, "clip_grad_norm": 1.0,
                                       "augment": True}, model=model, data=data)
    s = ctx.settings
    m = scratch.run(ctx)

    from dataclasses import replace

    from benchbench_plugins.protocols.training import AUGMENT_SEED_OFFSET

    train, test = data_spec.load("train", replace(data, augment=True)), data_spec.load("test", data)
    subset = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:40]  # train_subset, seed 0
    x_all, y_all = train.tensors[0][subset], train.tensors[1][subset]
    n, total, warm = 40, 8, 2
    decay = [p for p in plain.parameters() if p.ndim >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": [p for p in plain.parameters() if p.ndim < 2], "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.999))
    gen, step, loss = torch.Generator().manual_seed(0), 0, None
    flips = torch.Generator().manual_seed(0 + AUGMENT_SEED_OFFSET)  # one uniform per image, flipped below 0.5
    plain.train()
    while step < total:
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, 16):
            idx = order[start:start + 16]
            factor = (step + 1) / warm if step < warm else 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))
            for group in opt.param_groups:
                group["lr"] = 3e-3 * factor
            draws = torch.rand(len(idx), generator=flips)
            loss = F.cross_entropy(plain(train.transform(x_all[idx], draws)).float(), y_all[idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
            opt.step()
            step += 1
            if step == total:
                break
    plain.eval()
    with torch.no_grad():
        predicted = plain(test.apply(test.tensors[0])).argmax(dim=1)
    top1 = int((predicted == test.tensors[1]).sum()) / len(test)

    assert m["train_steps"] == 8 and m["train_images_seen"] == 16 * 5 + 8 * 2 + 16 and m["eval_images"] == len(test)
    assert m["top1"] == top1
    assert m["train_loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert m["eval_batch_size_used"] == s["eval_batch_size"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_data_is_resident_and_counts_match_the_cpu():
    from benchbench_plugins.protocols.loader import Loader
    from benchbench_plugins.protocols.training import evaluate

    cuda = torch.device("cuda")
    ds = _images(5000, seed=3)
    loader = Loader(ds, 256, shuffle=True, generator=torch.Generator().manual_seed(0), device=cuda)
    assert loader.resident
    x, y = next(iter(loader))
    assert x.device.type == y.device.type == "cuda"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Linear(32, 10))
    on_cpu = evaluate(model, ds, torch.device("cpu"), 256, precision=FP32)
    on_gpu = evaluate(model.to(cuda), ds, cuda, 256, precision=resolve("fp32", cuda))  # TF32 off: at a larger batch
    assert on_gpu.batch_size == 2048
    assert abs(on_gpu.top1 - on_cpu.top1) <= 2 / 5000 and abs(on_gpu.top5 - on_cpu.top5) <= 2 / 5000


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_features_come_from_resident_data_at_a_larger_batch_and_match_the_cpu():
    from benchbench_plugins.protocols.features import extract

    model, ds = _Tiny().eval(), _images(5000, seed=5)
    on_cpu = extract(model, ds, torch.device("cpu"), 256, precision=FP32)
    on_gpu = extract(model, ds, torch.device("cuda"), 256, precision=resolve("fp32", torch.device("cuda")))  # TF32 off
    assert on_gpu.batch_size == 2048 and on_gpu.x.device.type == on_gpu.y.device.type == "cpu"
    assert torch.equal(on_gpu.y, on_cpu.y) and torch.allclose(on_gpu.x, on_cpu.x, atol=1e-4)
