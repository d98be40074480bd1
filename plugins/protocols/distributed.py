"""One training cell on many devices: the checks before launch, and each rank's run (DDP or FSDP
around `fit` and `evaluate`), launched by benchbench.launch (torch's elastic launcher, as torchrun).

The ranks are spawned processes: each loads the plugin catalog again (with the run's `--plugin`
files), builds the cell's model and data from their ids, and loads the parent's initial weights, so
every rank starts from the weights the single-process run would train (FSDP: each rank builds
the model on the meta device and materialises only its shards, read from the parent's weights
file; see sharding.build_sharded). Rank 0 writes the trained weights to a file the parent loads
back into the cell's model (for `save_checkpoint`), and returns the metrics; the parent alone
writes the record. A rank that raises, dies or hangs (a collective waiting longer than
`timeout_s`) fails the cell with that rank's error; the launcher stops the others.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from benchbench.execution import Execution
from benchbench.launch import check_devices, check_global_batch, init_rank, launch
from benchbench.rendezvous import LaterNode, rendezvous_from_env
from benchbench.specs import DataOptions, ProtocolContext
from benchbench.threads import per_rank


@dataclass(frozen=True)
class Job:
    """What a rank needs to run the cell (picklable: ids, settings, paths)."""

    model: str
    dataset: str
    shape: Mapping[str, int]
    data: DataOptions
    settings: Mapping[str, Any]
    seed: int
    device_type: str  # "cpu" | "cuda"
    plugin_files: tuple[str, ...]
    folder: str  # init.pt in, final.pt out
    execution: Execution  # how every rank trains: training.cell_execution, as one device would
    desc: str = "train"
    show_progress: bool = False
    threads: int = 1  # CPU threads per rank (CPU only)


def check_parallel(device: torch.device, devices: int, nodes: int, batch_size: int) -> int:
    """The world size (devices x nodes); a BenchError, before anything starts, for a device type
    without a backend, more devices than this node has, or a global batch the ranks cannot split
    (the cell's own guard: `benchbench run` refuses such a suite before any cell runs)."""
    check_devices(device.type, devices)
    check_global_batch(batch_size, devices, nodes)
    return devices * nodes


def train_and_evaluate_parallel(ctx: ProtocolContext, model: torch.nn.Module, desc: str) -> dict[str, float]:
    """`training.train_and_evaluate` over devices x nodes processes; loads the trained weights into
    `model` and returns rank 0's metrics, plus `devices` (all of them) and img/s per device."""
    s = ctx.settings
    rdzv = rendezvous_from_env(s["nodes"])
    world = check_parallel(ctx.device, s["devices"], s["nodes"], s["batch_size"])
    with tempfile.TemporaryDirectory(prefix="benchbench-ranks-") as folder:
        torch.save(model.state_dict(), Path(folder) / "init.pt")
        if s["sharding"] == "fsdp":  # the buffers too: a model built on the meta device has none
            torch.save({name: b.detach() for name, b in model.named_buffers()}, Path(folder) / "buffers.pt")
        results = launch(run_rank, (make_job(ctx, model, folder, desc),), rdzv, s["devices"], folder=folder)
        if rdzv.node_rank != 0:  # rank 0 lives on node 0: its launcher reports the cell
            raise LaterNode(f"node {rdzv.node_rank} of {rdzv.nodes} trained its share; node 0 records the cell "
                            "(not a failure)")
        model.load_state_dict(torch.load(Path(folder) / "final.pt", weights_only=True))
    metrics = dict(results[0])
    metrics.update(devices=world, train_img_per_s_per_device=metrics["train_img_per_s"] / world)
    return metrics


def make_job(ctx: ProtocolContext, model: torch.nn.Module, folder: str, desc: str) -> Job:
    """What every rank of the cell gets: its ids, settings and paths, and how it trains (decided here
    once, by the same function as a one-device run: training.cell_execution)."""
    from benchbench_plugins.protocols.training import cell_execution

    s = ctx.settings
    shape = dict(num_classes=ctx.dataset_spec.num_classes, image_size=ctx.data.image_size, in_chans=ctx.data.in_chans)
    return Job(model=ctx.model_spec.id, dataset=ctx.dataset_spec.id, shape=shape, data=ctx.data, settings=dict(s),
               seed=ctx.seed, device_type=ctx.device.type, plugin_files=tuple(ctx.plugin_files), folder=folder,
               execution=cell_execution(ctx, model), desc=desc, show_progress=ctx.show_progress,
               threads=per_rank(s["devices"]))


def run_rank(job: Job) -> dict[str, float] | None:
    """One rank's run of the cell; rank 0 writes the trained weights and returns the metrics."""
    from torch.nn.parallel import DistributedDataParallel

    from benchbench.meters.throughput import peak_mem_mb
    from benchbench.plugins import load_catalog
    from benchbench_plugins.protocols.sharding import activation_checkpointing, build_sharded
    from benchbench_plugins.protocols.training import cell_splits, evaluate_timed, fit

    s = job.settings
    device, rank, world = init_rank(job.device_type, timeout_s=s["timeout_s"], threads=job.threads,
                                    local=s["nodes"] == 1)
    catalog = load_catalog(job.plugin_files)
    model_spec, dataset_spec = catalog.models.get(job.model), catalog.datasets.get(job.dataset)
    folder, fsdp = Path(job.folder), s["sharding"] == "fsdp"
    torch.manual_seed(job.seed)
    if fsdp:  # never the whole model: built on the meta device, each rank materialises its shards
        model = build_sharded(functools.partial(model_spec.build, **job.shape), folder / "init.pt",
                              folder / "buffers.pt", device)
    else:
        model = model_spec.build(**job.shape)
        model.load_state_dict(torch.load(folder / "init.pt", weights_only=True))
        model.to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train, test = cell_splits(dataset_spec, job.data, s, job.seed)
    with activation_checkpointing(model, s["activation_checkpointing"]):
        wrapped = model if fsdp else DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        metrics = fit(wrapped, train, s, device, job.seed, show_progress=job.show_progress and rank == 0,
                      desc=job.desc, rank=rank, world=world, execution=job.execution)
    # DDP: the replica itself (a forward pass needs no collective); FSDP: the sharded model, whose
    # forward gathers each unit's weights (every rank runs the same number of passes)
    metrics["train_peak_mem_mb_per_device"] = _max_over_ranks(peak_mem_mb(device)[0], device)
    metrics.update(evaluate_timed(model, test, s, device, rank=rank, world=world))
    state = _full_state_dict(model, fsdp=fsdp)
    if rank == 0:
        torch.save(state, folder / "final.pt")
        return metrics
    return None


def _max_over_ranks(value: float, device: torch.device) -> float:
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _full_state_dict(model: torch.nn.Module, *, fsdp: bool) -> dict[str, torch.Tensor]:
    """The whole model's weights on the CPU (FSDP: gathered from every rank, a collective)."""
    if not fsdp:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
