"""Data-parallel training of one cell (plugins/protocols/distributed.py) in real processes: gloo on
the CPU, 2 ranks launched by torch's elastic launcher, no mocks.

The independent source is the single-process run of the same cell: with `devices = 2` at the same
global batch the final weights match it (float64: to 1e-12; float32: to a stated tolerance) and so do
the metrics. Faults are real too: a plugin model whose rank 1 raises, is SIGKILLed or hangs."""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.usefixtures("mark_processes")


@pytest.fixture(autouse=True, scope="module")
def _cells_server():
    """The server of isolated cells (benchbench.run.isolated) lives as long as this process, by design:
    started before any test's mark, so that it is no test's leftover (a module run alone, or first in
    its worker, found it carrying the first test's mark)."""
    from benchbench.run import isolated

    isolated.prestart()


def _run(run_suite, ranks, name: str, model: str, devices: int, extra: str = ""):
    run_suite.write(ranks.SUITE.format(name=name, model=model, devices=devices, extra=extra), f"{name}.toml")
    run_suite.run()
    run_dir = next(d for d in run_suite.run_dirs() if d.parent.name == name)
    (record,) = run_suite.records(run_dir)
    return record, run_dir


# The NCCL tests compare distribution, not execution: every run eager (CUDA would compile by default).
EAGER = "compile = false\nfused_optimizer = false"


@pytest.mark.slow  # ~10 s: the slow step runs it (default tests stay under 4 min on 2 cores)
def test_two_devices_train_the_weights_one_device_trains_float64(run_suite, ranks):
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    one, one_dir = _run(run_suite, ranks, "one", "vit-f64", 1)
    two, two_dir = _run(run_suite, ranks, "two", "vit-f64", 2)
    assert one.ok and two.ok, (one.error, two.error)
    assert ranks.max_diff(ranks.weights(one_dir), ranks.weights(two_dir)) < 1e-12
    zeros = {k: torch.zeros_like(v) for k, v in ranks.weights(one_dir).items()}
    assert ranks.max_diff(ranks.weights(one_dir), zeros) > 0.01
    for key in ranks.SAME_METRICS:
        assert one.metrics[key] == two.metrics[key], key
    assert one.metrics["train_steps"] == 10  # ceil(299 / 32): the global batch, not 32 per rank
    assert two.execution == one.execution  # the ranks train as one device does (the cell's execution, decided once)
    # the step computes the loss in float32 (benchbench.step): a mean there, a sum x 2 / 32 per rank here
    assert two.metrics["train_loss"] == pytest.approx(one.metrics["train_loss"], rel=1e-6)
    # accounting: all devices count
    assert (one.devices, two.devices) == (1, 2)
    m = two.metrics
    assert m["train_device_days"] == pytest.approx(2 * m["train_device_seconds"] / 86_400)
    assert m["train_img_per_s"] == pytest.approx(m["train_images_seen"] / m["train_device_seconds"])
    assert m["train_img_per_s_per_device"] == pytest.approx(m["train_img_per_s"] / 2)
    assert m["train_peak_mem_mb_per_device"] > 0
    # each rank's predictions gathered back in dataset order: the single process's, image by image
    from benchbench.store.predictions import load

    p1, p2 = load(one_dir, one.predictions, one.key), load(two_dir, two.predictions, two.key)
    assert (p1.index == p2.index).all() and (p1.top5 == p2.top5).all() and (p1.label == p2.label).all()
    assert p2.p_true == pytest.approx(p1.p_true, rel=1e-6) and p2.hits().mean() == two.metrics["top1"]
    assert ranks.leftovers() == []


@pytest.mark.slow
def test_two_devices_float32_and_files_through_dataloader(run_suite, ranks):
    """float32 (the real ViT-Mu/7, SGD): equal within 1e-5; and a file-like dataset (synthetic, read
    item by item through a DataLoader) sharded by batch sampler: float64-exact."""
    one, one_dir = _run(run_suite, ranks, "one", "vit-mu7", 1, 'optimizer = "sgd"')
    two, two_dir = _run(run_suite, ranks, "two", "vit-mu7", 2, 'optimizer = "sgd"')
    assert one.ok and two.ok, (one.error, two.error)
    assert ranks.max_diff(ranks.weights(one_dir), ranks.weights(two_dir)) < 1e-5
    for key in ranks.SAME_METRICS:
        assert one.metrics[key] == two.metrics[key], key
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    files = 'resolution = 14\nnum_workers = 0\n'
    for name, devices in (("synth1", 1), ("synth2", 2)):
        run_suite.write(ranks.SUITE.format(name=name, model="vit-f64", devices=devices, extra=files)
                        .replace('"fashion-mnist"', '"synthetic"').replace("299", "203"), f"{name}.toml")
        run_suite.run()
    a, b = (next(d for d in run_suite.run_dirs() if d.parent.name == n) for n in ("synth1", "synth2"))
    (ra,), (rb,) = run_suite.records(a), run_suite.records(b)
    assert ra.ok and rb.ok, (ra.error, rb.error)
    assert ranks.max_diff(ranks.weights(a), ranks.weights(b)) < 1e-12
    assert ra.metrics["top1"] == rb.metrics["top1"]


@pytest.mark.slow
def test_augmented_two_devices_train_the_weights_one_device_trains_float64(run_suite, datafiles, tmp_path, ranks):
    """augment = true: in-memory images (random flips) and image files (random resized crops and flips,
    read item by item through a DataLoader): the same float64 weights on 2 devices as on 1."""
    import numpy as np
    from PIL import Image

    run_suite.plugin(ranks.PLUGIN, "f64.py")
    rng = np.random.default_rng(0)

    def noise(n):
        return [Image.fromarray(rng.integers(0, 256, (14, 14, 3), dtype=np.uint8)) for _ in range(n)]

    folder = datafiles.write_class_folders(tmp_path / "photos", {
        "train": {"a": noise(31), "b": noise(31)}, "test": {"a": noise(5), "b": noise(5)}})
    weights = {}
    for name, dataset, devices in (("mem1", "fashion-mnist", 1), ("mem2", "fashion-mnist", 2),
                                   ("files1", f"imagefolder:{folder}", 1), ("files2", f"imagefolder:{folder}", 2)):
        run_suite.write(ranks.SUITE.format(name=name, model="vit-f64", devices=devices, extra="augment = true\nnum_workers = 0")
                        .replace('"fashion-mnist"', f'"{dataset}"'), f"{name}.toml")
        run_suite.run()
        run_dir = next(d for d in run_suite.run_dirs() if d.parent.name == name)
        (record,) = run_suite.records(run_dir)
        assert record.ok and record.settings["augment"] is True, record.error
        weights[name] = ranks.weights(run_dir)
    assert ranks.max_diff(weights["mem1"], weights["mem2"]) < 1e-12
    assert ranks.max_diff(weights["files1"], weights["files2"]) < 1e-12


@pytest.mark.slow
def test_fsdp_with_activation_checkpointing_matches_ddp(run_suite, ranks):
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    ddp, ddp_dir = _run(run_suite, ranks, "ddp", "vit-f64", 2)
    fsdp, fsdp_dir = _run(run_suite, ranks, "fsdp", "vit-f64", 2, 'sharding = "fsdp"\nactivation_checkpointing = true')
    assert ddp.ok and fsdp.ok, (ddp.error, fsdp.error)
    assert ranks.max_diff(ranks.weights(ddp_dir), ranks.weights(fsdp_dir)) < 1e-12
    for key in ranks.SAME_METRICS:
        assert ddp.metrics[key] == fsdp.metrics[key], key
    assert ranks.leftovers() == []


# A float64 ViT of 25M parameters (201 MB) whose rank processes write, at their first training step,
# where the model was built and their resident-memory peak since the build began (Linux: writing 5
# to /proc/self/clear_refs resets VmHWM to the current RSS).
BIG = """
import json, os
import torch
import torch.distributed.fsdp, torch.distributed.tensor  # imported before the setup is measured
from benchbench import hookimpl
from benchbench.specs import ModelSpec
from benchbench_plugins.models.vision_transformer import VisionTransformer, Width

WIDTH = Width("Big", hidden=512, depth=8, mlp=2048, heads=8)


def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])


class Big(VisionTransformer):
    def forward(self, x):
        if self.training and "RANK" in os.environ and self.setup is not None:
            (rss_kb, built_on), self.setup = self.setup, None
            with open(os.path.join(os.environ["BIG_OUT"], "rank" + os.environ["RANK"] + ".json"), "w") as f:
                json.dump({"rss_kb": rss_kb, "hwm_kb": status_kb("VmHWM"), "built_on": built_on}, f)
        return super().forward(x.double())


def make(num_classes, image_size, in_chans):
    rss_kb = None
    if "RANK" in os.environ:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss_kb = status_kb("VmRSS")
    model = Big(WIDTH, 7, num_classes=num_classes, image_size=image_size, in_chans=in_chans).double()
    model.setup = (rss_kb, str(next(model.parameters()).device))
    return model


@hookimpl
def register_models(register):
    register(ModelSpec(id="vit-big-f64", name="ViT-Big/7 float64", family="vit", build=make,
                       default_resolution=28, resolution_multiple=7))
"""


@pytest.mark.slow
def test_an_fsdp_rank_never_holds_the_whole_model(run_suite, tmp_path, monkeypatch, ranks):
    """Each rank builds the model on the meta device and its resident memory grows by about its half
    of the weights (its shards, plus the file pages of those rows it read), never by the whole model:
    building it whole and loading the weights into it (the old way) grew it by twice the model."""
    import json

    monkeypatch.setenv("BIG_OUT", str(tmp_path))
    run_suite.plugin(BIG, "big.py")
    run_suite.write(ranks.SUITE.format(name="big", model="vit-big-f64", devices=2,
                                 extra='sharding = "fsdp"\noptimizer = "sgd"\nmomentum = 0.0\nsteps = 1')
                    .replace("test_subset = 99", "test_subset = 8"))
    run_suite.run()
    (record,) = run_suite.records()
    assert record.ok, record.error
    weights_kb = record.metrics["params"] * 8 / 1024  # float64
    assert weights_kb > 190_000
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["built_on"] == "meta"
        grew_kb = seen["hwm_kb"] - seen["rss_kb"]
        # now: its shards (half the weights) and the file pages of their rows (half); before: 2 x
        assert grew_kb < 1.5 * weights_kb, (rank, grew_kb, weights_kb)


def test_build_sharded_restores_the_weights_and_every_buffer(tmp_path):
    """In this process, a real gloo group of one: the sharded model's weights, BatchNorm statistics
    and a non-persistent buffer are the saved model's, its parameters are DTensors, built on meta."""
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor import DTensor

    from benchbench_plugins.protocols.sharding import build_sharded

    built_on = []

    class Unit(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.bn = nn.Linear(6, 6), nn.BatchNorm1d(6)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.units = nn.Sequential(Unit(), Unit(), Unit())
            self.head = nn.Linear(6, 3)
            self.register_buffer("scale", torch.arange(6.0), persistent=False)
            built_on.append(self.head.weight.device.type)

    torch.manual_seed(0)
    saved = Net()
    with torch.no_grad():
        for unit in saved.units:
            unit.bn.running_mean.normal_()
            unit.bn.running_var.uniform_(1, 2)
            unit.bn.num_batches_tracked.fill_(7)
        saved.scale.mul_(3)
    torch.save(saved.state_dict(), tmp_path / "init.pt")
    torch.save(dict(saved.named_buffers()), tmp_path / "buffers.pt")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = build_sharded(Net, tmp_path / "init.pt", tmp_path / "buffers.pt", torch.device("cpu"))
        assert built_on == ["cpu", "meta"]
        assert all(isinstance(p, DTensor) for p in model.parameters())
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        assert full.keys() == saved.state_dict().keys()
        assert all(torch.equal(full[k], v) for k, v in saved.state_dict().items())
        assert torch.equal(model.scale, torch.arange(6.0) * 3)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.expected(seconds=72)  # CI, 2 cores (.ci/run starts the longest first)
def test_a_rank_that_raises_dies_or_exits_fails_its_cell_and_the_suite_goes_on(run_suite, ranks):
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    run_suite.write(ranks.SUITE.format(name="faults", model="vit-f64-raises", devices=2, extra="")
                    .replace('models = ["vit-f64-raises"]',
                             'models = ["vit-f64-raises", "vit-f64-dies", "vit-f64-exits", "vit-f64"]'), "f.toml")
    assert run_suite.run() == 1
    by = {r.model: r for r in run_suite.records()}
    raised, died, exited = by["vit-f64-raises"], by["vit-f64-dies"], by["vit-f64-exits"]
    assert raised.status == "failed" and raised.error.startswith("RankFailure: rank 1 of 2 failed: ValueError: "
                                                                 "boom on rank 1"), raised.error
    assert 'raise ValueError("boom on rank 1")' in raised.traceback  # the rank's own traceback
    assert died.status == "failed" and "rank 1 of 2 failed: killed by signal SIGKILL" in died.error, died.error
    assert exited.status == "failed" and "rank 1 of 2 failed: exited with status 3" in exited.error, exited.error
    assert all(r.devices == 2 and r.metrics["params"] > 0 for r in (raised, died, exited))
    assert by["vit-f64"].ok
    assert ranks.leftovers() == []


@pytest.mark.slow
def test_a_hung_rank_fails_its_cell_at_the_collective_timeout(run_suite, ranks):
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    record, _ = _run(run_suite, ranks, "hang", "vit-f64-hangs", 2, "timeout_s = 3")
    assert record.status == "failed"
    # rank 0 waits in the gradients' all-reduce for the hung rank 1, gives up after 3 s and fails
    assert record.error.startswith("RankFailure: rank 0 of 2 failed: "), record.error
    assert "timed out" in record.error.lower() or "timeout" in record.error.lower(), record.error
    assert record.wall_seconds < 120
    assert ranks.leftovers() == []


# An executor whose cells run elsewhere: it hands each cell back as a scheduler's failure.
ELSEWHERE = """
from benchbench import hookimpl
from benchbench.specs import ExecutorSpec


class Elsewhere:
    def check(self, context, cells):
        pass

    def run(self, cells, dispatch):
        for cell in cells:
            dispatch.started(cell)
            dispatch.finished(dispatch.fault(cell, "sent elsewhere", job_id="e1"), cell)

    def close(self):
        pass


@hookimpl
def register_executors(register):
    register(ExecutorSpec(id="elsewhere", name="Elsewhere", create=lambda options: Elsewhere()))
"""


def test_a_suite_asking_for_more_devices_than_this_node_has_is_refused_before_any_cell_runs(run_suite, capsys, ranks):
    cores = len(os.sched_getaffinity(0))
    suite = run_suite.write(ranks.SUITE.format(name="many", model="vit-mu7", devices=cores + 1, extra="")
                            .replace('models = ["vit-mu7"]', 'models = ["vit-mu7", "bit-r20x1-small"]')
                            .replace("batch_size = 32", f"batch_size = {8 * (cores + 1)}"))  # divides
    # an executor whose cells run on other nodes gets them: the node that runs a cell checks its devices
    run_suite.plugin(ELSEWHERE, "elsewhere.py")
    assert run_suite.run("--executor", "elsewhere") == 1
    assert [r.error for r in run_suite.records()] == ["SchedulerError: sent elsewhere"] * 2
    records = run_suite.run_dir / "records.jsonl"
    before = records.read_bytes()
    capsys.readouterr()
    # in this process: refused before any cell runs; the run it would resume keeps its records as they were
    assert run_suite.run() == 2
    assert capsys.readouterr().err == (
        f"error: {suite}: cell vit-mu7 x fashion-mnist x scratch (seed 0) (and 1 other cell): devices = {cores + 1}: "
        f"this machine has {cores} CPU cores (one process each); set devices to at most {cores} in the suite, or "
        "run it with --executor on nodes that have them; nothing was run\n")
    assert records.read_bytes() == before and len(run_suite.run_dirs()) == 1


def test_an_indivisible_global_batch_is_refused_before_any_cell_runs(run_suite, capsys, ranks):
    """The 2nd cell's batch does not divide by its devices x nodes: the suite is refused before the 1st
    runs (exit 2, one line, no traceback, nothing written), in this process and for an executor's
    cells alike (the rule does not depend on where a cell runs), and --dry-run says the same."""
    suite = run_suite.write(ranks.SUITE.format(name="odd", model="vit-mu7", devices=2, extra="")
                            .replace('models = ["vit-mu7"]', 'models = ["vit-mu7", "bit-r20x1-small"]')
                            + '[[override]]\nmodels = ["bit-r20x1-small"]\nsettings.scratch = { batch_size = 33 }\n')
    run_suite.plugin(ELSEWHERE, "elsewhere.py")
    expected = (f"error: {suite}: cell bit-r20x1-small x fashion-mnist x scratch (seed 0): batch_size = 33 is the "
                "global batch: it must divide by the 2 devices (devices x nodes = 2 x 1); e.g. batch_size = 32 or "
                "34 in the suite; nothing was run\n")
    for args in ((), ("--dry-run",), ("--executor", "elsewhere")):
        capsys.readouterr()
        assert run_suite.run(*args) == 2, args
        assert capsys.readouterr().err == expected, args
    assert run_suite.run_dirs() == []


def test_the_cells_own_guard_says_the_same():
    """check_parallel, the guard inside the cell, applies the same rule with the same words."""
    from benchbench.errors import BenchError
    from benchbench.world import World
    from benchbench_plugins.protocols.distributed import check_parallel

    assert check_parallel(torch.device("cpu"), World(1, 2), 96) == 2
    with pytest.raises(BenchError) as exc:
        check_parallel(torch.device("cpu"), World(1, 4), 6)
    assert str(exc.value) == ("batch_size = 6 is the global batch: it must divide by the 4 devices (devices x nodes "
                              "= 1 x 4); e.g. batch_size = 4 or 8")
    with pytest.raises(BenchError, match=r"batch_size = 3 .* 4 devices .*; e.g. batch_size = 4$"):
        check_parallel(torch.device("cpu"), World(1, 4), 3)


# --- no processes: the pieces ----------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("in_memory", [True, False])
def test_the_ranks_parts_of_each_batch_are_the_single_process_batch(shuffle, in_memory):
    """Rank r's batch i, for r = 0..2 concatenated, is batch i of the one-process loader with the same
    seed: in-memory (sliced) and item by item (DataLoader with the ranks' batch sampler)."""
    from torch.utils.data import Subset, TensorDataset

    from benchbench_plugins.protocols.loader import Loader

    data = TensorDataset(torch.arange(103).float()[:, None], torch.arange(103))
    if not in_memory:
        data = Subset(data, list(range(103)))

    def batches(rank=0, world=1):
        gen = torch.Generator().manual_seed(7)
        return [y for _, y in Loader(data, 10, shuffle=shuffle, generator=gen, rank=rank, world=world)]

    whole = batches()
    parts = [batches(r, 3) for r in range(3)]
    assert len(whole) == 11 and all(len(p) == 11 for p in parts)
    for i, batch in enumerate(whole):
        assert torch.equal(torch.cat([p[i] for p in parts]), batch)
        assert [len(p[i]) for p in parts] == [len(batch) // 3 + (r < len(batch) % 3) for r in range(3)]
    assert sorted(torch.cat(whole).tolist()) == list(range(103))


class _Photos(torch.utils.data.Dataset):
    """Random-noise photos through the real training transform (random resized crop + flip)."""

    def __init__(self, n: int):
        import numpy as np
        from PIL import Image

        from benchbench.specs import DataOptions
        from benchbench_plugins.datasets.transforms import photo_transform

        rng = np.random.default_rng(0)
        self.images = [Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)) for _ in range(n)]
        self.transform = photo_transform(DataOptions(augment=True, image_size=8), 12)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), i


@pytest.mark.parametrize("in_memory", [True, False])
def test_augmented_batches_do_not_depend_on_the_ranks_or_workers(in_memory):
    """With augment_seed, rank r's part of augmented batch i (r = 0..2, concatenated) is the one-process
    augmented batch i, two epochs running: flips drawn for the global batch (in memory) or each image's
    crop and flip seeded per image of it (files, any number of worker processes)."""
    from benchbench_plugins.datasets.transforms import BatchTransform, TensorImages
    from benchbench_plugins.protocols.loader import Loader

    if in_memory:
        images = torch.arange(103 * 2 * 3, dtype=torch.float32).reshape(103, 1, 2, 3)
        data = TensorImages(images, torch.arange(103), BatchTransform(flip=True))
    else:
        data = _Photos(23)

    def epochs(rank=0, world=1, workers=0, seed=5, n=2):
        loader = Loader(data, 10, shuffle=True, generator=torch.Generator().manual_seed(7), rank=rank, world=world,
                        num_workers=workers, augment_seed=seed)
        return [x for _ in range(n) for x, _ in loader]

    whole = epochs()
    parts = [epochs(r, 3) for r in range(3)]
    for i, batch in enumerate(whole):
        assert torch.equal(torch.cat([p[i] for p in parts]), batch)
    assert not all(torch.equal(a, b) for a, b in zip(whole, epochs(seed=6)))  # the draws are random
    if in_memory:  # each image is itself or its mirror, both seen
        flat = torch.cat(whole)
        mirrored = [bool((flat[k] != images[int(flat[k].flatten()[0]) // 6]).any()) for k in range(len(flat))]
        assert 0 < sum(mirrored) < len(mirrored)
    else:  # one epoch: from the second on, DataLoader's permutation differs with persistent workers
        assert all(torch.equal(a, b) for a, b in zip(epochs(n=1), epochs(workers=2, n=1)))


def test_repeated_units_are_the_blocks_and_residual_units(catalog):
    from benchbench_plugins.protocols.sharding import repeated_units

    vit = catalog.models.get("vit-mu7").build(num_classes=10, image_size=28, in_chans=1)
    assert repeated_units(vit) == list(vit.blocks)  # one per layer (Table 1's depth)
    bit = catalog.models.get("bit-r20x1-small").build(num_classes=10, image_size=28, in_chans=1)
    units = repeated_units(bit)
    assert units == [u for stage in bit.stages for u in stage] and len(units) > 2
    assert repeated_units(torch.nn.Linear(2, 2)) == []


def test_activation_checkpointing_keeps_the_gradients_and_the_state_dict(catalog):
    from benchbench_plugins.protocols.sharding import activation_checkpointing

    torch.manual_seed(0)
    model = catalog.models.get("vit-mu7").build(num_classes=10, image_size=28, in_chans=1).double()
    x, y = torch.randn(4, 1, 28, 28, dtype=torch.float64), torch.tensor([0, 1, 2, 3])

    def grads():
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        return [p.grad.clone() for p in model.parameters()]

    plain, keys = grads(), list(model.state_dict())
    with activation_checkpointing(model) as units:
        assert units == len(model.blocks) and list(model.state_dict()) == keys
        checkpointed = grads()
    assert "forward" not in vars(model.blocks[0])  # undone
    assert all(torch.equal(a, b) for a, b in zip(plain, checkpointed))


def test_rendezvous_from_slurm_and_torchrun_environments():
    from benchbench.errors import BenchError
    from benchbench.runtime.rendezvous import Rendezvous, expand_nodelist, rendezvous_from_env

    assert expand_nodelist("gpu[01-03,07],login1,n[8-10]") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1",
                                                               "n8", "n9", "n10"]
    assert expand_nodelist("node17") == ["node17"]
    assert rendezvous_from_env(1, {}) == Rendezvous(1, 0, "127.0.0.1", 0)
    slurm = {"SLURM_NNODES": "4", "SLURM_NODEID": "2", "SLURM_JOB_NODELIST": "gpu[11-14]", "SLURM_JOB_ID": "123456"}
    assert rendezvous_from_env(4, slurm) == Rendezvous(4, 2, "gpu11", 20_000 + 123456 % 20_000)
    assert rendezvous_from_env(4, {**slurm, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}) == \
        Rendezvous(4, 2, "10.0.0.1", 29500)
    assert rendezvous_from_env(2, {"MASTER_ADDR": "h0", "MASTER_PORT": "29400", "NODE_RANK": "1"}) == \
        Rendezvous(2, 1, "h0", 29400)
    with pytest.raises(BenchError, match=r"nodes = 2, but this Slurm job has 4 \(SLURM_NNODES\)"):
        rendezvous_from_env(2, slurm)
    with pytest.raises(BenchError, match="nodes = 2 needs a multi-node launch: .* set MASTER_ADDR, MASTER_PORT, "
                                         "NODE_RANK"):
        rendezvous_from_env(2, {})
    with pytest.raises(BenchError, match="SLURM_NODEID='x': expected an integer"):
        rendezvous_from_env(4, {**slurm, "SLURM_NODEID": "x"})


@pytest.mark.slow
def test_profile_devices_reports_scaling_efficiency(run_suite, ranks):
    import json

    out = run_suite.cli("profile", "vit-mu7", "--device", "cpu", "--mode", "train", "--devices", "2",
                        "--batch-size", "16", "--min-steps", "3", "--warmup-steps", "1", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert (r["devices"], r["batch_size_per_device"], r["threads_per_device"]) == (2, 16, len(os.sched_getaffinity(0)) // 2)
    assert r["img_per_s_per_device"] == pytest.approx(r["img_per_s"] / 2)
    assert r["scaling_efficiency"] == pytest.approx(r["img_per_s"] / (2 * r["img_per_s_one_device"]))
    assert r["img_per_s"] > 0 and r["img_per_s_one_device"] > 0
    bad = run_suite.cli("profile", "vit-mu7", "--device", "cpu", "--devices", "2")
    assert bad.returncode == 2 and "--devices: scaling is measured for training; add --mode train" in bad.stderr
    assert ranks.leftovers() == []


@pytest.mark.slow
def test_sigterm_during_a_parallel_cell_stops_every_rank_and_exits_130(run_suite, ranks):
    import signal
    import time

    run_suite.write(ranks.SUITE.format(name="long", model="vit-mu7", devices=2, extra="").replace("epochs = 1", "epochs = 1000"))
    proc = run_suite.start()
    deadline = time.monotonic() + 300
    while not any("multiprocessing.spawn" in cmd for _, cmd in ranks.leftovers()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    time.sleep(3)  # the ranks are training
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130, proc.communicate()
    deadline = time.monotonic() + 30
    while ranks.leftovers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ranks.leftovers() == []


# --- NCCL on GPUs (skipped without them) -------------------------------------------------------------


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 1, reason="no CUDA device")
def test_nccl_fsdp_on_one_gpu_matches_the_plain_run_float64(run_suite, ranks):
    """The NCCL path on any GPU: FSDP over a world of 1 through the launcher against the in-process run."""
    run_suite.device = "cuda"
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    one, one_dir = _run(run_suite, ranks, "one", "vit-f64", 1, 'precision = "fp32"\n' + EAGER)
    fsdp, fsdp_dir = _run(run_suite, ranks, "fsdp", "vit-f64", 1, 'precision = "fp32"\nsharding = "fsdp"\n' + EAGER)
    assert one.ok and fsdp.ok, (one.error, fsdp.error)
    assert ranks.max_diff(ranks.weights(one_dir), ranks.weights(fsdp_dir)) < 1e-10
    assert ranks.leftovers() == []


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_nccl_two_gpus_train_the_weights_one_gpu_trains(run_suite, sharding, ranks):
    run_suite.device = "cuda"
    run_suite.plugin(ranks.PLUGIN, "f64.py")
    one, one_dir = _run(run_suite, ranks, "one", "vit-f64", 1, 'precision = "fp32"\n' + EAGER)
    two, two_dir = _run(run_suite, ranks, "two", "vit-f64", 2, f'precision = "fp32"\nsharding = "{sharding}"\n' + EAGER)
    assert one.ok and two.ok, (one.error, two.error)
    assert ranks.max_diff(ranks.weights(one_dir), ranks.weights(two_dir)) < 1e-10  # float64 on GPUs: reductions reorder
    for key in ranks.SAME_METRICS:
        assert one.metrics[key] == two.metrics[key], key
    assert ranks.leftovers() == []
